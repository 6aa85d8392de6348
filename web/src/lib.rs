//! The zoo in a browser: the `names` example's GPT and all-MiniLM-L6-v2, run client-side
//! in WebAssembly on flex, or on the browser's WebGPU, from files the page fetches.
//!
//! The models are the zoo's own crates, unchanged; only the files come from memory
//! instead of a folder (`BertModel::from_memory`, `BertTokenizer::from_json`, a burnpack
//! record from bytes). A browser reads a GPU's buffers back only asynchronously, so
//! sampling and embedding read their results with `generate_async` and
//! `into_data_async`, and their functions return promises. `cargo xtask web` builds the
//! module and the page; `web/README.md` says how it is tested.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use burn::config::Config;
use burn::module::Module;
use burn::tensor::wgpu::WgpuBackend;
use burn::tensor::{Bytes, Device};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;
use zoo_core::{GenerationConfig, generate_async};
use zoo_data::CharVocab;
use zoo_data::names::{name_prompt, sampled_name};
use zoo_decoder::{DecoderConfig, DecoderLm};
use zoo_encoder::{BertModel, BertTokenizer, PoolingConfig, SentenceEncoder};

/// An error as the page shows it: one line, through `Display`.
fn js_error(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

thread_local! {
    /// The device that models built from now on run on, set by [`use_backend`].
    static DEVICE: RefCell<Device> = RefCell::new(Device::flex());
    /// The browser's WebGPU device, once set up: a runtime is set up only once.
    static WEBGPU: RefCell<Option<Device>> = const { RefCell::new(None) };
}

/// The device that models built now run on.
fn device() -> Device {
    DEVICE.with(|d| d.borrow().clone())
}

/// The name the page shows for `device`.
fn backend_name(device: &Device) -> String {
    match zoo_device::BackendName::of(device) {
        Some(zoo_device::BackendName::Wgpu) => "webgpu".to_string(),
        Some(b) => b.to_string(),
        None => format!("{device:?}"),
    }
}

/// Run when the module is instantiated: static constructors run, and panics are printed
/// to the console with their message.
#[wasm_bindgen(start)]
pub fn start() {
    // Some of the wgpu backend's crates register items with static constructors. When
    // nothing calls `__wasm_call_ctors`, wasm-ld runs them at the start of every
    // exported function, so every call into the module (each letter's callback among
    // them) paid for all of them again: sampling names ran 16 times slower. Called here
    // once, at instantiation, it tells the linker that the module runs them itself.
    #[cfg(target_arch = "wasm32")]
    // SAFETY: the linker's own function, run once, before any other code of the module.
    unsafe {
        __wasm_call_ctors();
    }
    console_error_panic_hook::set_once();
}

#[cfg(target_arch = "wasm32")]
unsafe extern "C" {
    /// The static constructors of the module, which wasm-ld puts together.
    fn __wasm_call_ctors();
}

/// The name of the backend that models built now compute on: `flex` or `webgpu`.
#[wasm_bindgen]
pub fn backend() -> String {
    backend_name(&device())
}

/// Makes models built from now on compute on `name`: `flex` (the CPU, in this module) or
/// `webgpu` (the browser's GPU, set up on first use). Models built before keep their
/// device. Resolves to the backend's name.
///
/// # Errors
/// Another name, or a browser whose WebGPU gives no device.
#[wasm_bindgen]
pub async fn use_backend(name: String) -> Result<String, JsError> {
    let device = match name.as_str() {
        "flex" => Device::flex(),
        "webgpu" => match WEBGPU.with(|w| w.borrow().clone()) {
            Some(device) => device,
            None => {
                let device = Device::wgpu_options()
                    .graphics_api(WgpuBackend::WebGpu)
                    .init_async()
                    .await
                    .map_err(|e| js_error(format!("WebGPU gave no device: {e}")))?;
                WEBGPU.with(|w| *w.borrow_mut() = Some(device.clone()));
                device
            }
        },
        other => {
            return Err(js_error(format!(
                "unknown backend {other:?}: this page computes on flex or webgpu"
            )));
        }
    };
    let name = backend_name(&device);
    DEVICE.with(|d| *d.borrow_mut() = device);
    Ok(name)
}

/// A future's error as the promise's rejection: an `Error` with the message.
fn rejection(e: impl std::fmt::Display) -> JsValue {
    JsValue::from(js_error(e))
}

/// The names GPT, loaded from the `model.json` and `model.bpk` that
/// `cargo run --example names -- --checkpoint DIR` writes.
#[wasm_bindgen]
pub struct Names {
    model: Rc<DecoderLm>,
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
        Ok(Names {
            model: Rc::new(model),
        })
    }

    /// Samples `n` names that begin with `prefix`, at `temperature` among the `top_k`
    /// likeliest letters, with the sampler seeded by `seed`, as the `names` example's
    /// `--sample-only` does. `on_letter(row, letter)` is called for each letter as it is
    /// sampled (the end symbol `$` included), so a page can show them as they come.
    /// Resolves to the names.
    ///
    /// # Errors
    /// The promise is rejected on a prefix with a character other than `a`..`z`, one too
    /// long for the model, or invalid settings, each named.
    pub fn sample(
        &self,
        prefix: String,
        n: usize,
        temperature: f64,
        top_k: usize,
        seed: u64,
        on_letter: js_sys::Function,
    ) -> js_sys::Promise {
        let model = Rc::clone(&self.model);
        future_to_promise(async move {
            let vocab = CharVocab::names();
            let prompt = name_prompt(&vocab, &prefix).map_err(rejection)?;
            let max_len = model.max_len();
            if prompt.len() >= max_len {
                return Err(rejection(format!(
                    "prefix {prefix:?} leaves no room: the model reads at most {max_len} \
                     symbols, the start symbol included"
                )));
            }
            let end = vocab.id('$').expect("'$' is in the names vocabulary");
            let cfg = GenerationConfig::sampling(max_len - prompt.len(), temperature, seed)
                .with_top_k(top_k)
                .with_stop_tokens(vec![end]);
            let out = generate_async(&*model, &vec![prompt; n], &cfg, |row, token| {
                let letter = vocab.decode(&[token]).unwrap_or_default();
                let _ = on_letter.call2(
                    &JsValue::NULL,
                    &JsValue::from(row as u32),
                    &JsValue::from(letter),
                );
            })
            .await
            .map_err(rejection)?;
            let names = js_sys::Array::new();
            for t in &out.tokens {
                names.push(&JsValue::from(
                    sampled_name(&vocab, &prefix, t).map_err(rejection)?,
                ));
            }
            Ok(names.into())
        })
    }
}

/// A sentence-transformers model (all-MiniLM-L6-v2), loaded from the files of its folder.
#[wasm_bindgen]
pub struct Embedder {
    encoder: Rc<SentenceEncoder>,
    /// The device its model was built on.
    device: Device,
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
        let device = device();
        let bert =
            BertModel::from_memory(config_json, Arc::from(weights), &device).map_err(js_error)?;
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
            encoder: Rc::new(SentenceEncoder {
                bert,
                tokenizer,
                pooling: pooling.modes().map_err(js_error)?,
                normalize,
            }),
            device,
        })
    }

    /// The embeddings of `sentences`, row after row (`sentences.len()` rows of
    /// [`Embedder::width`] values): resolves to a `Float32Array`.
    ///
    /// # Errors
    /// The promise is rejected on no sentences, or embeddings that cannot be read back.
    pub fn embed(&self, sentences: Vec<String>) -> js_sys::Promise {
        let encoder = Rc::clone(&self.encoder);
        let device = self.device.clone();
        future_to_promise(async move {
            let refs: Vec<&str> = sentences.iter().map(String::as_str).collect();
            let embeddings = encoder.encode(&refs, 32, &device).map_err(rejection)?;
            let values = embeddings
                .into_data_async()
                .await
                .map_err(|e| rejection(format!("cannot read the embeddings back: {e:?}")))?
                .convert::<f32>()
                .try_into_vec::<f32>()
                .map_err(|e| rejection(format!("cannot read the embeddings back: {e:?}")))?;
            Ok(js_sys::Float32Array::from(values.as_slice()).into())
        })
    }

    /// The name of the backend its model computes on.
    pub fn backend(&self) -> String {
        backend_name(&self.device)
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

