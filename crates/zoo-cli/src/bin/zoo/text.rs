//! `zoo generate` and `zoo chat`: text from a causal LM, with the folder's
//! `generation_config.json` filling in what the command line leaves unset, streamed as
//! `transformers`' `TextStreamer` prints it (the whole sequence decoded, its new part
//! shown).

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::tensor::Device;
use serde_json::{Value, json};
use zoo_core::registry::{Task, TextGenerator};
use zoo_core::{BeamConfig, Generation, GenerationConfig, StoppingCriterion};
use zoo_data::{ChatTemplate, LmTokenizer, TextStream};
use zoo_hub::AutoModel;

use crate::error::{CliError, Result};
use crate::not_for;

/// The sampling options of `generate` and `chat`.
#[derive(clap::Args, Debug)]
pub(crate) struct SamplingArgs {
    /// A PEFT LoRA adapter folder (adapter_config.json, adapter_model.safetensors) to
    /// fold into the model's weights.
    #[arg(long)]
    adapter: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) quant: crate::QuantArgs,
    /// Most tokens to add. Default: the folder's generation_config.json, else 50.
    #[arg(long)]
    max_new_tokens: Option<usize>,
    /// Sampling temperature; 0 picks the most likely token (greedy). Default: the
    /// folder's generation_config.json (greedy unless it sets do_sample), else 0.
    #[arg(long, allow_negative_numbers = true)]
    temperature: Option<f64>,
    /// Sample only among the k most likely tokens.
    #[arg(long)]
    top_k: Option<usize>,
    /// Sample only among the most likely tokens whose probabilities reach p.
    #[arg(long)]
    top_p: Option<f64>,
    /// Sample only among the tokens at least this fraction as likely as the most likely
    /// one (min-p).
    #[arg(long)]
    min_p: Option<f64>,
    /// Penalty on tokens already in the text (1 is off).
    #[arg(long)]
    repetition_penalty: Option<f64>,
    /// End the text once it contains this string (`\n`, `\t` and `\\` stand for a
    /// newline, a tab and a backslash); may be given more than once.
    #[arg(long = "stop", value_name = "TEXT")]
    stop: Vec<String>,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

#[derive(clap::Args, Debug)]
pub(crate) struct GenerateArgs {
    /// The checkpoint folder, with its tokenizer.json, or a hub id (org/name).
    #[arg(long)]
    pub(crate) model: PathBuf,
    /// The text to continue.
    #[arg(long)]
    prompt: String,
    /// Beams of beam search (above 1, the text is printed when the search ends). Takes
    /// none of the sampling options.
    #[arg(long)]
    num_beams: Option<usize>,
    #[command(flatten)]
    sampling: SamplingArgs,
}

#[derive(clap::Args, Debug)]
pub(crate) struct ChatArgs {
    /// The checkpoint folder, with its tokenizer.json and a chat template
    /// (tokenizer_config.json's chat_template, or chat_template.jinja); or a hub id.
    #[arg(long)]
    pub(crate) model: PathBuf,
    /// A JSON list of {"role", "content"} messages, as apply_chat_template takes it: the
    /// answer to them is printed, instead of turns read from standard input.
    #[arg(long)]
    messages: Option<PathBuf>,
    /// With --messages: print the rendered prompt (with the generation prompt) and stop;
    /// no model is loaded.
    #[arg(long, requires = "messages")]
    render: bool,
    /// A system message before the turns read from standard input.
    #[arg(long, conflicts_with = "messages")]
    system: Option<String>,
    #[command(flatten)]
    sampling: SamplingArgs,
}

/// The folder's tokenizer and the ids of `text` (the command's `what`: prompt, text),
/// with the special tokens the tokenizer adds; an empty text, or one without tokens, is
/// refused.
pub(crate) fn tokenize(dir: &Path, text: &str, what: &str) -> Result<(LmTokenizer, Vec<usize>)> {
    if text.is_empty() {
        return Err(CliError::Input(format!("the {what} is empty")));
    }
    let tokenizer = LmTokenizer::from_pretrained(dir)?;
    let ids = tokenizer.encode(text)?;
    if ids.is_empty() {
        return Err(CliError::Input(format!("the {what} has no tokens")));
    }
    Ok((tokenizer, ids))
}

/// The causal LM of a folder, or the error that names what the folder holds instead.
fn load_lm(
    command: &str,
    dir: &Path,
    adapter: Option<&Path>,
    quant: &crate::QuantArgs,
    device: &Device,
) -> Result<AutoModel> {
    let model = quant.load_adapted(dir, adapter, device)?;
    if model.generator().is_none() {
        return Err(not_for(command, Task::Generate, "a causal LM", dir, &model));
    }
    Ok(model)
}

/// The sampling settings: the flags, else the folder's `generation_config.json`, else
/// greedy decoding of 50 tokens; generation stops at the checkpoint's end-of-text tokens,
/// and never picks an id the tokenizer cannot turn into text.
fn sampling_config(
    args: &SamplingArgs,
    lm: &dyn TextGenerator,
    tokenizer: &LmTokenizer,
    max_new_tokens: usize,
) -> Result<GenerationConfig> {
    let file = lm.generation_defaults().cloned().unwrap_or_default();
    let mut cfg = file.generation(max_new_tokens, args.seed);
    match args.temperature {
        None => {}
        Some(t) if t >= 0.0 => cfg.temperature = t,
        Some(t) => {
            return Err(CliError::Input(format!(
                "--temperature must be >= 0, got {t}"
            )));
        }
    }
    if let Some(k) = args.top_k {
        cfg = cfg.with_top_k(k);
    }
    if let Some(p) = args.top_p {
        cfg = cfg.with_top_p(p);
    }
    if let Some(p) = args.min_p {
        cfg = cfg.with_min_p(p);
    }
    if let Some(r) = args.repetition_penalty {
        cfg = cfg.with_repetition_penalty(r);
    }
    cfg = cfg
        .with_stop_tokens(lm.stop_tokens())
        .with_banned_tokens(tokenizer.undecodable(lm.vocab_size()));
    cfg.validate()?;
    Ok(cfg)
}

/// `max_new_tokens` from the flag, the folder's file, or 50.
fn max_new_tokens(args: &SamplingArgs, lm: &dyn TextGenerator) -> usize {
    args.max_new_tokens
        .or(lm.generation_defaults().and_then(|g| g.max_new_tokens))
        .unwrap_or(50)
}

/// `\n`, `\t` and `\\` of a command-line stop string as a newline, a tab and a
/// backslash; any other character as it is.
fn unescape(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('\\') => out.push('\\'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// Ends a row once the text its new tokens add after the prompt contains a stop string.
#[derive(Debug)]
struct StopStrings {
    tokenizer: LmTokenizer,
    prompt: Vec<usize>,
    stops: Vec<String>,
}

impl StoppingCriterion for StopStrings {
    fn stops(&self, _row: usize, new_tokens: &[usize]) -> bool {
        self.tokenizer
            .continuation(&self.prompt, new_tokens)
            .is_ok_and(|text| self.stops.iter().any(|s| text.contains(s.as_str())))
    }
}

/// `cfg` with the `--stop` strings of `args` for a continuation of `prompt`.
fn with_stop_strings(
    cfg: &GenerationConfig,
    args: &SamplingArgs,
    tokenizer: &LmTokenizer,
    prompt: &[usize],
) -> Result<GenerationConfig> {
    if args.stop.is_empty() {
        return Ok(cfg.clone());
    }
    let stops: Vec<String> = args.stop.iter().map(|s| unescape(s)).collect();
    if stops.iter().any(String::is_empty) {
        return Err(CliError::Input("a --stop string is empty".into()));
    }
    Ok(cfg.clone().with_stopping(Arc::new(StopStrings {
        tokenizer: tokenizer.clone(),
        prompt: prompt.to_vec(),
        stops,
    })))
}

/// Generates after `prompt`, printing each token's text as it comes (what it adds to the
/// whole sequence's text, so a SentencePiece tokenizer keeps the space before the first
/// new word), then a newline and the figures on stderr.
fn stream(
    lm: &dyn TextGenerator,
    tokenizer: &LmTokenizer,
    prompt: Vec<usize>,
    cfg: &GenerationConfig,
) -> Result<Generation> {
    let mut stdout = std::io::stdout();
    let mut stream = TextStream::after(tokenizer, &prompt)?;
    let mut failed = None;
    let out = lm.generate(&[prompt], cfg, &mut |_, token| {
        if failed.is_some() {
            return;
        }
        match stream.push(token) {
            Ok(piece) => {
                out!("{piece}");
                let _ = stdout.flush();
            }
            Err(e) => failed = Some(e),
        }
    })?;
    if let Some(e) = failed {
        outln!();
        return Err(e.into());
    }
    outln!("{}", stream.finish()?);
    let n = out.tokens.first().map_or(0, Vec::len);
    let last = out.tokens.first().and_then(|t| t.last());
    let why = match (out.stopped.first() == Some(&true), last) {
        (false, _) => "",
        (true, Some(t)) if cfg.stop_tokens.contains(t) => ", stopped at the end-of-text token",
        (true, _) => ", stopped at a stop string",
    };
    eprintln!(
        "[{n} new tokens in {:.2} s, {:.1} tokens/s{why}]",
        out.elapsed.as_secs_f64(),
        out.tokens_per_second(),
    );
    Ok(out)
}

pub(crate) fn generate_text(args: &GenerateArgs, device: &Device) -> Result<()> {
    let model = load_lm(
        "generate",
        &args.model,
        args.sampling.adapter.as_deref(),
        &args.sampling.quant,
        device,
    )?;
    let lm = model.generator().expect("checked by load_lm");
    let (tokenizer, prompt) = tokenize(&args.model, &args.prompt, "prompt")?;
    let s = &args.sampling;
    let max_new = max_new_tokens(s, lm);
    let file = lm.generation_defaults().cloned().unwrap_or_default();
    let num_beams = args.num_beams.or(file.num_beams).unwrap_or(1);
    if num_beams != 1 {
        let sampling = [
            ("--temperature", s.temperature.is_some_and(|t| t != 0.0)),
            ("--top-k", s.top_k.is_some()),
            ("--top-p", s.top_p.is_some()),
            ("--min-p", s.min_p.is_some()),
            ("--repetition-penalty", s.repetition_penalty.is_some()),
            ("--stop", !s.stop.is_empty()),
        ];
        if let Some((flag, _)) = sampling.iter().find(|(_, set)| *set) {
            return Err(CliError::Input(format!(
                "beam search takes no {flag}; use --num-beams 1 to sample"
            )));
        }
        if args.num_beams.is_none() && file.samples() {
            return Err(CliError::Input(format!(
                "the folder's generation_config.json asks for {num_beams} beams with \
                 do_sample, and sampled beam search is not implemented; pass --num-beams 1 \
                 to sample or --num-beams {num_beams} to search"
            )));
        }
        let mut cfg = BeamConfig::new(num_beams, max_new).with_stop_tokens(lm.stop_tokens());
        cfg.banned_tokens = tokenizer.undecodable(lm.vocab_size());
        let out = lm.beam_search(std::slice::from_ref(&prompt), &cfg)?;
        outln!(
            "{}{}",
            args.prompt,
            tokenizer.continuation(&prompt, &out.tokens[0])?
        );
        eprintln!(
            "[{} new tokens in {:.2} s, {num_beams} beams, score {:.4}]",
            out.tokens[0].len(),
            out.elapsed.as_secs_f64(),
            out.scores[0]
        );
        return Ok(());
    }
    let cfg = sampling_config(s, lm, &tokenizer, max_new)?;
    let cfg = with_stop_strings(&cfg, s, &tokenizer, &prompt)?;
    out!("{}", args.prompt);
    let _ = std::io::stdout().flush();
    stream(lm, &tokenizer, prompt, &cfg)?;
    Ok(())
}

/// The messages of a `--messages` file.
fn read_messages(path: &Path) -> Result<Value> {
    let file = |message: String| CliError::File {
        path: path.to_path_buf(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| file(e.to_string()))?;
    let messages: Value =
        serde_json::from_str(&text).map_err(|e| file(format!("not valid JSON: {e}")))?;
    if !messages.is_array() {
        return Err(file(
            "expected a list of {\"role\", \"content\"} messages".into(),
        ));
    }
    Ok(messages)
}

/// The prompt of `messages` with the generation prompt, as token ids: the template
/// writes the special tokens itself, so the tokenizer adds none (as
/// `apply_chat_template(..., tokenize=True)`).
fn chat_prompt(
    template: &ChatTemplate,
    tokenizer: &LmTokenizer,
    messages: &Value,
) -> Result<Vec<usize>> {
    let text = template.render(messages, true)?;
    let ids = tokenizer.encode_plain(&text)?;
    if ids.is_empty() {
        return Err(CliError::Input("the chat prompt has no tokens".into()));
    }
    Ok(ids)
}

pub(crate) fn chat(args: &ChatArgs, device: &Device) -> Result<()> {
    let template = ChatTemplate::from_pretrained(&args.model)?.ok_or_else(|| {
        CliError::Unsupported(format!(
            "{} has no chat template (tokenizer_config.json's chat_template or \
             chat_template.jinja)",
            args.model.display()
        ))
    })?;
    let from_file = args.messages.as_deref().map(read_messages).transpose()?;
    if args.render {
        let messages = from_file.expect("clap requires --messages with --render");
        out!("{}", template.render(&messages, true)?);
        return Ok(());
    }
    let model = load_lm(
        "chat",
        &args.model,
        args.sampling.adapter.as_deref(),
        &args.sampling.quant,
        device,
    )?;
    let lm = model.generator().expect("checked by load_lm");
    let tokenizer = LmTokenizer::from_pretrained(&args.model)?;
    let max_new = max_new_tokens(&args.sampling, lm);
    let mut cfg = sampling_config(&args.sampling, lm, &tokenizer, max_new)?;
    // The template's end-of-turn token ends an answer too (Llama 3's <|eot_id|>, Qwen's
    // <|im_end|>), when the vocabulary has it.
    if let Some(id) = template
        .special_token("eos_token")
        .and_then(|t| tokenizer.token_id(t))
        && !cfg.stop_tokens.contains(&id)
    {
        cfg.stop_tokens.push(id);
    }
    if let Some(messages) = from_file {
        let prompt = chat_prompt(&template, &tokenizer, &messages)?;
        let cfg = with_stop_strings(&cfg, &args.sampling, &tokenizer, &prompt)?;
        stream(lm, &tokenizer, prompt, &cfg)?;
        return Ok(());
    }
    let mut messages: Vec<Value> = args
        .system
        .iter()
        .map(|s| json!({"role": "system", "content": s}))
        .collect();
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| CliError::Input(format!("cannot read standard input: {e}")))?;
        if line.trim().is_empty() {
            continue;
        }
        messages.push(json!({"role": "user", "content": line}));
        let prompt = chat_prompt(&template, &tokenizer, &Value::Array(messages.clone()))?;
        let turn = with_stop_strings(&cfg, &args.sampling, &tokenizer, &prompt)?;
        let out = stream(lm, &tokenizer, prompt, &turn)?;
        let answer = tokenizer.decode(&out.tokens[0])?;
        messages.push(json!({"role": "assistant", "content": answer}));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_strings_read_escapes_as_a_shell_user_means_them() {
        assert_eq!(unescape("\\n\\n"), "\n\n");
        assert_eq!(unescape("a\\tb\\\\c\\q\\"), "a\tb\\c\\q\\");
        assert_eq!(unescape("plain"), "plain");
    }
}
