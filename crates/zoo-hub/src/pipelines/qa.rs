//! HF's question-answering pipeline: the best spans of a context for a question, from a
//! model with a span head, over a context longer than the model's window.

use std::path::Path;

use burn::tensor::Device;
use zoo_data::{LmTokenizer, PairWindow};

use super::{needs, one_row};
use crate::{AutoModel, HubError, Result};

/// The arguments of [`question_answering`], HF's, with HF's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QaOptions {
    /// How many answers, best first (1).
    pub top_k: usize,
    /// The longest answer, in tokens (15).
    pub max_answer_len: usize,
    /// Tokens per window, question and special tokens included; `None` takes
    /// `model_max_length` of `tokenizer_config.json`, at most 384.
    pub max_seq_len: Option<usize>,
    /// Context tokens each window repeats from the one before; `None` takes half the
    /// window, at most 128.
    pub doc_stride: Option<usize>,
    /// Whether the empty answer competes, scored by the least probability of the
    /// first token as both start and end over the windows.
    pub handle_impossible_answer: bool,
    /// Whether an answer widens to the whole words its first and last tokens lie in.
    pub align_to_words: bool,
}

impl Default for QaOptions {
    fn default() -> Self {
        Self {
            top_k: 1,
            max_answer_len: 15,
            max_seq_len: None,
            doc_stride: None,
            handle_impossible_answer: false,
            align_to_words: true,
        }
    }
}

/// One answer of [`question_answering`].
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The probability of the span: its start's times its end's, summed over the spans
    /// (in any window) whose text is the same, case aside.
    pub score: f64,
    /// First character of the answer in the context.
    pub start: usize,
    /// One past its last character.
    pub end: usize,
    /// Its text.
    pub answer: String,
}

/// The pipeline's window and stride: given, or from the tokenizer's `model_max_length`.
fn window(dir: &Path, options: &QaOptions) -> Result<(usize, usize)> {
    let max_seq_len = match options.max_seq_len {
        Some(n) => n,
        None => {
            let config = json_file(&dir.join("tokenizer_config.json"))?;
            // HF's default model_max_length is a huge integer that JSON keeps as a float.
            config["model_max_length"]
                .as_f64()
                .filter(|n| *n >= 1.0)
                .map_or(384, |n| if n < 384.0 { n as usize } else { 384 })
        }
    };
    if max_seq_len == 0 {
        return Err(HubError::Input("max_seq_len must be > 0, got 0".into()));
    }
    let doc_stride = options.doc_stride.unwrap_or((max_seq_len / 2).min(128));
    if doc_stride > max_seq_len {
        return Err(HubError::Input(format!(
            "doc_stride ({doc_stride}) is larger than max_seq_len ({max_seq_len})"
        )));
    }
    Ok((max_seq_len, doc_stride))
}

/// A folder's JSON file, or `null` when it has none.
fn json_file(path: &Path) -> Result<serde_json::Value> {
    if !path.is_file() {
        return Ok(serde_json::Value::Null);
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| HubError::Input(format!("{}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| HubError::Input(format!("{}: {e}", path.display())))
}

/// The classifier token's id, which HF's pipeline lets be an answer's start or end
/// (models that learnt to put the empty answer there): `cls_token` of
/// `tokenizer_config.json`, else the default of the model type's tokenizer class.
fn cls_id(dir: &Path, tokenizer: &LmTokenizer) -> Result<Option<usize>> {
    let config = json_file(&dir.join("tokenizer_config.json"))?;
    let named = match &config["cls_token"] {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(o) => o
            .get("content")
            .and_then(|c| c.as_str())
            .map(str::to_string),
        _ => None,
    };
    let token = match named {
        Some(token) => Some(token),
        None => {
            let model = json_file(&dir.join("config.json"))?;
            match model["model_type"].as_str().unwrap_or_default() {
                "bert" | "distilbert" => Some("[CLS]".to_string()),
                "roberta" | "xlm-roberta" | "camembert" => Some("<s>".to_string()),
                _ => None,
            }
        }
    };
    Ok(token.and_then(|t| tokenizer.token_id(&t)))
}

/// One window's start and end logits.
fn span_logits(
    model: &AutoModel,
    window: &PairWindow,
    token_types: bool,
    device: &Device,
) -> Result<(Vec<f32>, Vec<f32>)> {
    let types = token_types.then(|| window.type_ids());
    let input = one_row(&window.ids(), types.as_deref());
    let mut outputs = model.forward(&input, device)?;
    let mut take = |key: &str| {
        outputs
            .iter()
            .position(|(name, _, _)| *name == key)
            .map(|i| outputs.swap_remove(i).1)
            .ok_or_else(|| HubError::Input(format!("the model gave no {key}")))
    };
    Ok((take("start_logits")?, take("end_logits")?))
}

/// Softmax over the tokens an answer may use, the others at HF's -10000; in f32 with
/// the sum accumulated in f64.
fn masked_softmax(logits: &[f32], allowed: &[bool]) -> Vec<f32> {
    let x: Vec<f32> = logits
        .iter()
        .zip(allowed)
        .map(|(&v, &ok)| if ok { v } else { -10000.0 })
        .collect();
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exp: Vec<f32> = x.iter().map(|v| (v - max).exp()).collect();
    let sum = exp.iter().map(|&e| f64::from(e)).sum::<f64>() as f32;
    exp.into_iter().map(|e| e / sum).collect()
}

/// HF's question-answering pipeline (transformers 4's `QuestionAnsweringPipeline` with
/// a fast tokenizer): the question and the context cut into windows of `max_seq_len`
/// tokens with `doc_stride` tokens of overlap; for each window the span head's start
/// and end probabilities over the context tokens (and the classifier token), the spans
/// of at most `max_answer_len` tokens scored by their product, and the best
/// `2 top_k + 10` of them widened to whole words; spans of the same text add up, and
/// the best `top_k` over all windows come back, best first. The question comes first in
/// each window, as for every tokenizer that pads on the right. Token type ids go in
/// when the model has more than one type.
///
/// # Errors
/// A model without a span head, an empty question or context, `top_k` or
/// `max_answer_len` of 0, a stride larger than the window, a question that leaves no
/// room for the context, or what the tokenizer or the model rejects (a window longer
/// than the model's positions).
pub fn question_answering(
    model: &AutoModel,
    tokenizer: &LmTokenizer,
    question: &str,
    context: &str,
    options: &QaOptions,
    device: &Device,
) -> Result<Vec<Answer>> {
    needs(model, "question answering", "ForQuestionAnswering")?;
    for (name, text) in [("question", question), ("context", context)] {
        if text.trim().is_empty() {
            return Err(HubError::Input(format!("the {name} is empty")));
        }
    }
    if options.top_k == 0 {
        return Err(HubError::Input("top_k must be > 0, got 0".into()));
    }
    if options.max_answer_len == 0 {
        return Err(HubError::Input("max_answer_len must be > 0, got 0".into()));
    }
    let dir = model.dir();
    let (max_seq_len, doc_stride) = window(dir, options)?;
    let windows = tokenizer
        .encode_pair_windows(question, context, max_seq_len, doc_stride)
        .map_err(|e| {
            HubError::Input(format!(
                "the question and context cannot be cut into windows: {}",
                e.0
            ))
        })?;
    let cls = cls_id(dir, tokenizer)?;
    let token_types = json_file(&dir.join("config.json"))?["type_vocab_size"]
        .as_u64()
        .is_some_and(|n| n > 1);
    let chars: Vec<char> = context.chars().collect();
    let pre_top_k = if options.align_to_words {
        2 * options.top_k + 10
    } else {
        options.top_k
    };
    let mut min_null = 1_000_000.0_f64;
    let mut answers: Vec<Answer> = Vec::new();
    for window in &windows {
        let (start_logits, end_logits) =
            span_logits(model, window, token_types, device).map_err(|e| {
                HubError::Input(format!(
                    "{e} (a window of max_seq_len {max_seq_len}: a smaller one fits the model)"
                ))
            })?;
        let ids = window.ids();
        let allowed: Vec<bool> = window
            .sequence_ids()
            .iter()
            .zip(&ids)
            .map(|(seq, &id)| *seq == Some(1) || Some(id) == cls)
            .collect();
        let mut start = masked_softmax(&start_logits, &allowed);
        let mut end = masked_softmax(&end_logits, &allowed);
        min_null = min_null.min(f64::from(start[0] * end[0]));
        start[0] = 0.0;
        end[0] = 0.0;
        let t = ids.len();
        // Every (start, end) cell, zero outside 0 <= end - start < max_answer_len; the
        // best first, the first cell first among equals.
        let score = |cell: usize| {
            let (s, e) = (cell / t, cell % t);
            if e >= s && e - s < options.max_answer_len {
                start[s] * end[e]
            } else {
                0.0
            }
        };
        let mut cells: Vec<(f32, usize)> = (0..t * t).map(|c| (score(c), c)).collect();
        cells.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        // HF keeps a span whose ends are both allowed tokens, or token 0 (its test reads
        // the mask's row indices as well as its column indices).
        let any = allowed.iter().any(|&a| a);
        let kept = |i: usize| allowed[i] || (i == 0 && any);
        let offsets = window.offsets();
        for &(score, cell) in cells.iter().take(pre_top_k) {
            let (s, e) = (cell / t, cell % t);
            if !(kept(s) && kept(e)) {
                continue;
            }
            let words = if options.align_to_words {
                window
                    .word_chars(s, 1)
                    .zip(window.word_chars(e, 1))
                    .map(|(a, b)| (a.0, b.1))
            } else {
                None
            };
            let (from, to) = words.unwrap_or((offsets[s].0, offsets[e].1));
            let text: String = chars
                .get(from..to.min(chars.len()))
                .unwrap_or_default()
                .iter()
                .collect();
            let lower = text.to_lowercase();
            match answers
                .iter_mut()
                .find(|a| a.answer.to_lowercase() == lower)
            {
                Some(same) => same.score += f64::from(score),
                None => answers.push(Answer {
                    score: f64::from(score),
                    start: from,
                    end: to,
                    answer: text,
                }),
            }
        }
    }
    if options.handle_impossible_answer {
        answers.push(Answer {
            score: min_null,
            start: 0,
            end: 0,
            answer: String::new(),
        });
    }
    // HF sorts by score, keeping the order found among equal scores.
    answers.sort_by(|a, b| b.score.total_cmp(&a.score));
    answers.truncate(options.top_k);
    Ok(answers)
}
