//! The zoo in a browser: the `names` example's GPT and all-MiniLM-L6-v2, run client-side
//! in WebAssembly on flex, from files the page fetches.
//!
//! The models are the zoo's own crates, unchanged; only the files come from memory
//! instead of a folder (`BertModel::from_memory`, `BertTokenizer::from_json`, a burnpack
//! record from bytes). `cargo xtask web` builds the module and the page; `web/README.md`
//! says how it is tested.

use std::sync::Arc;

use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Bytes, Device};
use wasm_bindgen::prelude::*;
use zoo_core::{GenerationConfig, generate};
use zoo_data::CharVocab;
use zoo_data::names::{name_prompt, sampled_name};
use zoo_decoder::{DecoderConfig, DecoderLm};
use zoo_encoder::{BertModel, BertTokenizer, PoolingConfig, SentenceEncoder};

/// An error as the page shows it: one line, through `Display`.
fn js_error(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

/// The backend the models run on here.
fn device() -> Device {
    Device::default()
}

/// Run when the module is instantiated: panics are printed to the console with their
/// message.
#[wasm_bindgen(start)]
pub fn start() {
    console_error_panic_hook::set_once();
}

/// The name of the backend the module computes on, as the page shows it.
#[wasm_bindgen]
pub fn backend() -> String {
    let device = device();
    zoo_device::BackendName::of(&device).map_or_else(|| format!("{device:?}"), |b| b.to_string())
}

/// The names GPT, loaded from the `model.json` and `model.bpk` that
/// `cargo run --example names -- --checkpoint DIR` writes.
#[wasm_bindgen]
pub struct Names {
    model: DecoderLm,
}

#[wasm_bindgen]
impl Names {
    /// Builds the model from the text of `model.json` and the bytes of `model.bpk`.
    ///
    /// # Errors
    /// A config that does not parse, or weights that do not fit it.
    #[wasm_bindgen(constructor)]
    pub fn new(config_json: &str, weights: Vec<u8>) -> Result<Names, JsError> {
        let config = DecoderConfig::load_binary(config_json.as_bytes())
            .map_err(|e| js_error(format!("model.json: {e}")))?;
        let record = burn::store::ModuleRecord::from_bytes(Bytes::from_bytes_vec(weights))
            .map_err(|e| js_error(format!("model.bpk: {e}")))?;
        let model = config
            .init(&device())
            .map_err(js_error)?
            .try_load_record(record)
            .map_err(|e| js_error(format!("model.bpk: {e}")))?;
        Ok(Names { model })
    }

    /// Samples `n` names that begin with `prefix`, at `temperature` among the `top_k`
    /// likeliest letters, with the sampler seeded by `seed`, as the `names` example's
    /// `--sample-only` does. `on_letter(row, letter)` is called for each letter as it is
    /// sampled (the end symbol `$` included), so a page can show them as they come.
    ///
    /// # Errors
    /// A prefix with a character other than `a`..`z`, one too long for the model, or
    /// invalid settings, each named.
    pub fn sample(
        &self,
        prefix: &str,
        n: usize,
        temperature: f64,
        top_k: usize,
        seed: u64,
        on_letter: &js_sys::Function,
    ) -> Result<Vec<String>, JsError> {
        let vocab = CharVocab::names();
        let prompt = name_prompt(&vocab, prefix).map_err(js_error)?;
        let max_len = self.model.max_len();
        if prompt.len() >= max_len {
            return Err(js_error(format!(
                "prefix {prefix:?} leaves no room: the model reads at most {max_len} symbols, \
                 the start symbol included"
            )));
        }
        let end = vocab.id('$').expect("'$' is in the names vocabulary");
        let cfg = GenerationConfig::sampling(max_len - prompt.len(), temperature, seed)
            .with_top_k(top_k)
            .with_stop_tokens(vec![end]);
        let out = generate(&self.model, &vec![prompt; n], &cfg, |row, token| {
            let letter = vocab.decode(&[token]).unwrap_or_default();
            let _ = on_letter.call2(
                &JsValue::NULL,
                &JsValue::from(row as u32),
                &JsValue::from(letter),
            );
        })
        .map_err(js_error)?;
        out.tokens
            .iter()
            .map(|t| sampled_name(&vocab, prefix, t).map_err(js_error))
            .collect()
    }
}

/// A sentence-transformers model (all-MiniLM-L6-v2), loaded from the files of its folder.
#[wasm_bindgen]
pub struct Embedder {
    encoder: SentenceEncoder,
}

#[wasm_bindgen]
impl Embedder {
    /// Builds the encoder from the texts of `modules.json`, `config.json`,
    /// `1_Pooling/config.json`, `sentence_bert_config.json` (empty when the folder has
    /// none) and `tokenizer.json`, and the bytes of `model.safetensors`.
    ///
    /// # Errors
    /// A file that does not parse, a module type other than Transformer, Pooling and
    /// Normalize, or weights that do not fit the config.
    #[wasm_bindgen(constructor)]
    pub fn new(
        modules_json: &str,
        config_json: &str,
        weights: Vec<u8>,
        pooling_json: &str,
        sentence_bert_json: &str,
        tokenizer_json: &str,
    ) -> Result<Embedder, JsError> {
        let modules: Vec<serde_json::Value> = serde_json::from_str(modules_json)
            .map_err(|e| js_error(format!("modules.json: {e}")))?;
        let mut normalize = false;
        for m in &modules {
            let kind = m.get("type").and_then(|t| t.as_str()).unwrap_or("");
            match kind.rsplit('.').next().unwrap_or(kind) {
                "Transformer" | "Pooling" => {}
                "Normalize" => normalize = true,
                other => {
                    return Err(js_error(format!(
                        "modules.json: module type {other:?} is not supported (Transformer, \
                         Pooling and Normalize are)"
                    )));
                }
            }
        }
        let bert =
            BertModel::from_memory(config_json, Arc::from(weights), &device()).map_err(js_error)?;
        let pooling: PoolingConfig = serde_json::from_str(pooling_json)
            .map_err(|e| js_error(format!("1_Pooling/config.json: {e}")))?;
        if pooling.word_embedding_dimension != bert.hidden_size() {
            return Err(js_error(format!(
                "1_Pooling/config.json: word_embedding_dimension {} differs from the model's \
                 hidden_size {}",
                pooling.word_embedding_dimension,
                bert.hidden_size()
            )));
        }
        let max_seq_length = if sentence_bert_json.trim().is_empty() {
            None
        } else {
            serde_json::from_str::<serde_json::Value>(sentence_bert_json)
                .map_err(|e| js_error(format!("sentence_bert_config.json: {e}")))?
                .get("max_seq_length")
                .and_then(serde_json::Value::as_u64)
        };
        let max_len = max_seq_length
            .map_or(bert.max_len(), |m| m as usize)
            .min(bert.max_len());
        let tokenizer =
            BertTokenizer::from_json("tokenizer.json", tokenizer_json, max_len).map_err(js_error)?;
        Ok(Embedder {
            encoder: SentenceEncoder {
                bert,
                tokenizer,
                pooling: pooling.modes().map_err(js_error)?,
                normalize,
            },
        })
    }

    /// The embeddings of `sentences`, row after row (`sentences.len()` rows of
    /// [`Embedder::width`] values).
    ///
    /// # Errors
    /// No sentences.
    pub fn embed(&self, sentences: Vec<String>) -> Result<Vec<f32>, JsError> {
        let refs: Vec<&str> = sentences.iter().map(String::as_str).collect();
        let device = device();
        let embeddings = self
            .encoder
            .encode(&refs, 32, &device)
            .map_err(js_error)?;
        embeddings
            .into_data()
            .try_into_vec::<f32>()
            .map_err(|e| js_error(format!("{e:?}")))
    }

    /// The width of an embedding.
    pub fn width(&self) -> usize {
        self.encoder.bert.hidden_size() * self.encoder.pooling.len()
    }
}

/// Cosine similarity of every pair of `rows` rows of `width` values (row-major,
/// `rows * rows` values).
#[wasm_bindgen]
pub fn cosine_matrix(embeddings: &[f32], width: usize) -> Vec<f32> {
    let rows: Vec<&[f32]> = embeddings.chunks(width.max(1)).collect();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    let mut out = Vec::with_capacity(rows.len() * rows.len());
    for a in &rows {
        for b in &rows {
            let dot: f32 = a.iter().zip(*b).map(|(x, y)| x * y).sum();
            out.push(dot / (norm(a) * norm(b)));
        }
    }
    out
}
