//! HF's pipelines over an [`AutoModel`] and its [`LmTokenizer`], giving what
//! `transformers` gives:
//! - [`fill_mask`]: a masked LM's top `k` tokens for each mask, with their probabilities
//!   and the text with each filled in;
//! - [`token_classification`] (NER): a token classifier's labels, per token or grouped
//!   into entities with HF's `simple` and `first` aggregation, with character offsets;
//! - [`question_answering`]: the best spans of a context for a question, over windows
//!   with a stride when the context is longer than the model's;
//! - [`zero_shot_image`]: CLIP's probabilities of an image over candidate labels, each
//!   put into a prompt template.

use std::path::Path;

use burn::tensor::Device;
use zoo_core::registry::{ForwardInput, IntMatrix, Pixels};
use zoo_data::{DetailedEncoding, LmTokenizer};

use crate::{AutoModel, HubError, Result};

mod qa;

pub use qa::{Answer, QaOptions, question_answering};

/// One candidate for a mask.
#[derive(Debug, Clone, PartialEq)]
pub struct Fill {
    /// Its probability at the mask.
    pub score: f32,
    /// Its id.
    pub token: usize,
    /// Its text.
    pub token_str: String,
    /// The text with the mask filled by it (special tokens kept when the text has more
    /// than one mask, as HF does).
    pub sequence: String,
}

/// How token labels become entities (HF's `aggregation_strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregation {
    /// One entity per token, with its label (`entity` and `index` in HF's output).
    None,
    /// Adjacent tokens with the same label (B-/I- prefixes aside) form one entity,
    /// scored by their mean.
    Simple,
    /// Each word takes its first token's label, then words group as in `Simple`.
    First,
}

impl std::str::FromStr for Aggregation {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "none" => Ok(Self::None),
            "simple" => Ok(Self::Simple),
            "first" => Ok(Self::First),
            other => Err(format!(
                "aggregation {other:?} is not supported (none, simple and first are)"
            )),
        }
    }
}

/// A labelled span of the text.
#[derive(Debug, Clone, PartialEq)]
pub struct Entity {
    /// The label (`B-PER`), or with aggregation the entity type (`PER`).
    pub label: String,
    /// The label's probability, or the mean over the grouped tokens.
    pub score: f32,
    /// The token (with [`Aggregation::None`]) or the words' text.
    pub word: String,
    /// First character of the span.
    pub start: usize,
    /// One past the last character.
    pub end: usize,
    /// The token's position in the encoding, with [`Aggregation::None`].
    pub index: Option<usize>,
}

fn needs(model: &AutoModel, task: &str, head: &str) -> Result<()> {
    let arch = model.architecture();
    if arch.name.ends_with(head) {
        return Ok(());
    }
    Err(HubError::Input(format!(
        "{task} needs a model with a {head} head; {} is {} ({})",
        model.dir().display(),
        arch.model_type,
        arch.name
    )))
}

fn tok(e: zoo_data::TokenizerError) -> HubError {
    HubError::Input(e.to_string())
}

/// One unpadded row of ids as the model's input (`input_ids` and an all-ones
/// `attention_mask`), with `token_type_ids` when given.
fn one_row(ids: &[usize], types: Option<&[usize]>) -> ForwardInput {
    let row = |v: &[usize]| vec![v.iter().map(|&x| x as i64).collect::<Vec<i64>>()];
    ForwardInput {
        attention_mask: Some(IntMatrix {
            name: "attention_mask",
            rows: vec![vec![1; ids.len()]],
        }),
        input_ids: Some(IntMatrix {
            name: "input_ids",
            rows: row(ids),
        }),
        token_type_ids: types.map(|t| IntMatrix {
            name: "token_type_ids",
            rows: row(t),
        }),
        ..ForwardInput::default()
    }
}

/// The model's `logits` for one encoded text, `[T, width]` row-major, and the width.
fn logits(model: &AutoModel, enc: &DetailedEncoding, device: &Device) -> Result<(Vec<f32>, usize)> {
    let input = one_row(&enc.ids, None);
    let outputs = model.forward(&input, device)?;
    let (_, values, shape) = outputs
        .into_iter()
        .find(|(name, _, _)| *name == "logits")
        .ok_or_else(|| HubError::Input("the model gave no logits".into()))?;
    let width = shape.last().copied().unwrap_or(0);
    Ok((values, width))
}

/// Softmax of one row, in f32 as HF computes it.
fn softmax(row: &[f32]) -> Vec<f32> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exp: Vec<f32> = row.iter().map(|x| (x - max).exp()).collect();
    let sum: f32 = exp.iter().sum();
    exp.into_iter().map(|e| e / sum).collect()
}

/// The first index of the largest value.
fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best
}

/// HF's fill-mask pipeline: for each mask token in `text` (`[MASK]` or `<mask>`), the
/// `top_k` most probable tokens.
///
/// # Errors
/// A model that is no masked LM, `top_k` of 0, a text without a mask, or what the
/// tokenizer or the model rejects.
pub fn fill_mask(
    model: &AutoModel,
    tokenizer: &LmTokenizer,
    text: &str,
    top_k: usize,
    device: &Device,
) -> Result<Vec<Vec<Fill>>> {
    needs(model, "fill-mask", "ForMaskedLM")?;
    if top_k == 0 {
        return Err(HubError::Input("top_k must be > 0, got 0".into()));
    }
    let (mask_token, mask) = ["[MASK]", "<mask>"]
        .iter()
        .find_map(|t| tokenizer.token_id(t).map(|id| (*t, id)))
        .ok_or_else(|| {
            HubError::Input("the tokenizer has no mask token ([MASK] or <mask>)".into())
        })?;
    let enc = tokenizer.encode_detailed(text).map_err(tok)?;
    let masks: Vec<usize> = (0..enc.ids.len()).filter(|&i| enc.ids[i] == mask).collect();
    if masks.is_empty() {
        return Err(HubError::Input(format!(
            "the text has no mask token ({mask_token})"
        )));
    }
    let (values, v) = logits(model, &enc, device)?;
    let pad = ["[PAD]", "<pad>"]
        .iter()
        .find_map(|t| tokenizer.token_id(t));
    let single = masks.len() == 1;
    let mut out = Vec::with_capacity(masks.len());
    for &at in &masks {
        let probs = softmax(&values[at * v..(at + 1) * v]);
        let mut order: Vec<usize> = (0..v).collect();
        order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
        let mut row = Vec::with_capacity(top_k);
        for &token in order.iter().take(top_k) {
            let mut ids = enc.ids.clone();
            ids[at] = token;
            ids.retain(|&id| Some(id) != pad);
            row.push(Fill {
                score: probs[token],
                token,
                token_str: tokenizer.decode_with(&[token], false).map_err(tok)?,
                sequence: tokenizer.decode_with(&ids, single).map_err(tok)?,
            });
        }
        out.push(row);
    }
    Ok(out)
}

/// `id2label` of the folder's `config.json`, by class id (`LABEL_i` where it names none).
fn labels(dir: &Path, classes: usize) -> Result<Vec<String>> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| HubError::Input(format!("{}: {e}", path.display())))?;
    let config: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| HubError::Input(format!("{}: {e}", path.display())))?;
    Ok((0..classes)
        .map(|i| {
            config["id2label"][i.to_string()]
                .as_str()
                .map_or_else(|| format!("LABEL_{i}"), str::to_string)
        })
        .collect())
}

/// A token before aggregation.
struct PreEntity {
    word: String,
    scores: Vec<f32>,
    start: usize,
    end: usize,
    index: usize,
    is_subword: bool,
}

/// HF's token-classification pipeline: each token's label (the tokens the tokenizer
/// adds left out), aggregated as `aggregation` says, and entities labelled `O` dropped.
///
/// # Errors
/// A model that is no token classifier, or what the tokenizer or the model rejects.
pub fn token_classification(
    model: &AutoModel,
    tokenizer: &LmTokenizer,
    text: &str,
    aggregation: Aggregation,
    device: &Device,
) -> Result<Vec<Entity>> {
    needs(model, "token classification", "ForTokenClassification")?;
    let enc = tokenizer.encode_detailed(text).map_err(tok)?;
    let (values, classes) = logits(model, &enc, device)?;
    let labels = labels(model.dir(), classes)?;
    let chars: Vec<char> = text.chars().collect();
    let prefixed = tokenizer.has_subword_prefix();
    let unk = tokenizer.unk_id();
    let mut pre = Vec::new();
    for index in 0..enc.ids.len() {
        if enc.special[index] {
            continue;
        }
        let (start, end) = enc.offsets[index];
        let word_ref: String = chars.get(start..end).unwrap_or_default().iter().collect();
        let mut word = enc.tokens[index].clone();
        let mut is_subword = if prefixed {
            word.chars().count() != word_ref.chars().count()
        } else {
            // HF's fallback: a token that does not follow a space continues a word.
            start > 0 && !chars[start - 1..=start.min(chars.len() - 1)].contains(&' ')
        };
        if Some(enc.ids[index]) == unk {
            word = word_ref;
            is_subword = false;
        }
        pre.push(PreEntity {
            word,
            scores: softmax(&values[index * classes..(index + 1) * classes]),
            start,
            end,
            index,
            is_subword,
        });
    }
    let tokens: Vec<Entity> = match aggregation {
        Aggregation::None | Aggregation::Simple => pre
            .iter()
            .map(|p| {
                let best = argmax(&p.scores);
                Entity {
                    label: labels[best].clone(),
                    score: p.scores[best],
                    word: p.word.clone(),
                    start: p.start,
                    end: p.end,
                    index: Some(p.index),
                }
            })
            .collect(),
        Aggregation::First => {
            let mut words: Vec<Vec<&PreEntity>> = Vec::new();
            for p in &pre {
                match words.last_mut() {
                    Some(group) if p.is_subword => group.push(p),
                    _ => words.push(vec![p]),
                }
            }
            words
                .iter()
                .map(|group| {
                    let best = argmax(&group[0].scores);
                    let pieces: Vec<String> = group.iter().map(|p| p.word.clone()).collect();
                    Ok(Entity {
                        label: labels[best].clone(),
                        score: group[0].scores[best],
                        word: tokenizer.tokens_to_string(&pieces).map_err(tok)?,
                        start: group[0].start,
                        end: group[group.len() - 1].end,
                        index: None,
                    })
                })
                .collect::<Result<_>>()?
        }
    };
    let entities = if aggregation == Aggregation::None {
        tokens
    } else {
        group(tokenizer, &tokens)?
    };
    Ok(entities.into_iter().filter(|e| e.label != "O").collect())
}

/// A label's B/I tag and its type: `B-PER` is (B, PER); a label without a prefix is
/// an I of itself.
fn tag(label: &str) -> (char, &str) {
    if let Some(kind) = label.strip_prefix("B-") {
        ('B', kind)
    } else if let Some(kind) = label.strip_prefix("I-") {
        ('I', kind)
    } else {
        ('I', label)
    }
}

/// Adjacent entities of one type, where no B starts a new one, become one entity.
fn group(tokenizer: &LmTokenizer, entities: &[Entity]) -> Result<Vec<Entity>> {
    let mut groups: Vec<Vec<&Entity>> = Vec::new();
    for e in entities {
        let (bi, kind) = tag(&e.label);
        match groups.last_mut() {
            Some(g) if tag(&g[g.len() - 1].label).1 == kind && bi != 'B' => g.push(e),
            _ => groups.push(vec![e]),
        }
    }
    groups
        .into_iter()
        .map(|g| {
            let first = g[0];
            let label = first
                .label
                .split_once('-')
                .map_or(first.label.as_str(), |(_, kind)| kind)
                .to_string();
            let words: Vec<String> = g.iter().map(|e| e.word.clone()).collect();
            Ok(Entity {
                label,
                score: g.iter().map(|e| e.score).sum::<f32>() / g.len() as f32,
                word: tokenizer.tokens_to_string(&words).map_err(tok)?,
                start: first.start,
                end: g[g.len() - 1].end,
                index: None,
            })
        })
        .collect()
}

/// One candidate label of [`zero_shot_image`] with its probability.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelScore {
    /// The label, as given.
    pub label: String,
    /// Its probability: the softmax of `logits_per_image` over the labels.
    pub score: f32,
}

/// HF's default prompt of the zero-shot image classification pipeline.
pub const DEFAULT_TEMPLATE: &str = "This is a photo of {}.";

/// HF's zero-shot image classification pipeline: each label put into `template` (at its
/// one `{}`), the texts tokenized and padded, the image prepared by the folder's
/// `preprocessor_config.json`, and the softmax of CLIP's `logits_per_image` over the
/// labels, most probable first.
///
/// # Errors
/// A model that is not CLIP, no labels, a template without exactly one `{}`, an image
/// or preprocessor configuration that cannot be read, or what the tokenizer or the model
/// rejects (a prompt longer than the text tower's positions).
pub fn zero_shot_image(
    model: &AutoModel,
    tokenizer: &LmTokenizer,
    image: &Path,
    labels: &[String],
    template: &str,
    device: &Device,
) -> Result<Vec<LabelScore>> {
    check_zero_shot(model, labels, template)?;
    let processor = zoo_vision::ImageProcessor::from_pretrained(model.dir())
        .map_err(|e| HubError::Input(e.to_string()))?;
    let pixels = processor
        .load(&[image], device)
        .map_err(|e| HubError::Input(e.to_string()))?;
    zero_shot_pixels(model, tokenizer, pixels, labels, template, device)
}

/// What [`zero_shot_image`] checks before reading anything: a CLIP model, some labels,
/// and a template with one `{}`.
///
/// # Errors
/// Each failed check, named.
pub fn check_zero_shot(model: &AutoModel, labels: &[String], template: &str) -> Result<()> {
    let arch = model.architecture();
    if arch.name != "CLIPModel" {
        return Err(HubError::Input(format!(
            "zero-shot image classification needs a CLIPModel; {} is {} ({})",
            model.dir().display(),
            arch.model_type,
            arch.name
        )));
    }
    if labels.is_empty() {
        return Err(HubError::Input(
            "zero-shot image classification needs at least one candidate label".into(),
        ));
    }
    if template.matches("{}").count() != 1 {
        return Err(HubError::Input(format!(
            "the template {template:?} must hold exactly one {{}}, where each label goes"
        )));
    }
    Ok(())
}

/// [`zero_shot_image`] over an image already prepared, `[1, C, H, W]`.
///
/// # Errors
/// As [`zero_shot_image`], and a batch of other than one image.
pub fn zero_shot_pixels(
    model: &AutoModel,
    tokenizer: &LmTokenizer,
    pixels: burn::tensor::Tensor<4>,
    labels: &[String],
    template: &str,
    device: &Device,
) -> Result<Vec<LabelScore>> {
    check_zero_shot(model, labels, template)?;
    let shape = pixels.dims();
    if shape[0] != 1 {
        return Err(HubError::Input(format!(
            "zero-shot image classification takes one image at a time, got {}",
            shape[0]
        )));
    }
    let values = zoo_core::registry::floats(pixels)?;
    let mut rows = labels
        .iter()
        .map(|label| tokenizer.encode(&template.replacen("{}", label, 1)))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(tok)?;
    // Padded at the end with each row's last token (CLIP's end of text, its padding
    // token), masked out.
    let t = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut mask = Vec::with_capacity(rows.len());
    for row in &mut rows {
        let len = row.len();
        mask.push((0..t).map(|i| i64::from(i < len)).collect());
        row.resize(t, row.last().copied().unwrap_or(0));
    }
    let input = ForwardInput {
        input_ids: Some(IntMatrix {
            name: "input_ids",
            rows: rows
                .into_iter()
                .map(|r| r.into_iter().map(|id| id as i64).collect())
                .collect(),
        }),
        attention_mask: Some(IntMatrix {
            name: "attention_mask",
            rows: mask,
        }),
        pixel_values: Some(Pixels { shape, values }),
        ..ForwardInput::default()
    };
    let outputs = model.forward(&input, device)?;
    let (_, logits, _) = outputs
        .into_iter()
        .find(|(name, _, _)| *name == "logits_per_image")
        .ok_or_else(|| HubError::Input("the model gave no logits_per_image".into()))?;
    let probs = softmax(&logits);
    let mut scores: Vec<LabelScore> = labels
        .iter()
        .zip(probs)
        .map(|(label, score)| LabelScore {
            label: label.clone(),
            score,
        })
        .collect();
    // HF sorts by score, keeping the given order among equal scores.
    scores.sort_by(|a, b| b.score.total_cmp(&a.score));
    Ok(scores)
}
