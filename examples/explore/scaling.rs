//! Scaling arithmetic from configurations: parameters counted exactly from a config
//! (`DecoderConfig::num_params`, `BertConfig::num_params`, `ViTConfig::num_params`, each
//! tested against the built model), forward FLOPs per token (2 per non-embedding weight,
//! plus attention's 2·T·d per layer: Kaplan et al., 2020, table 1), training FLOPs
//! ≈ 6·N·D, and Chinchilla's compute-optimal data, ≈ 20 tokens per parameter (Hoffmann et
//! al., 2022), at the tutorials' rough 4 bytes of text per token.

use std::path::{Path, PathBuf};

use zoo_decoder::{DecoderConfig, HfDecoderConfig};
use zoo_encoder::BertConfig;
use zoo_examples::Error;
use zoo_seq2seq::{MarianConfig, T5Config};
use zoo_vision::ViTConfig;

/// One row: a model's sizes as the arithmetic needs them.
struct Sizes {
    name: String,
    params: usize,
    /// Embedding tables (token, position, type; a tied head is not counted twice).
    embedding: usize,
    layers: usize,
    d_model: usize,
    context: usize,
    /// Where the numbers came from.
    source: String,
}

fn decoder(name: &str, cfg: &DecoderConfig, source: &str) -> Sizes {
    let positions = match cfg.positions {
        zoo_decoder::PositionKind::Learned => cfg.max_len * cfg.d_model,
        zoo_decoder::PositionKind::Rope { .. } => 0,
    };
    Sizes {
        name: name.into(),
        params: cfg.num_params(),
        embedding: cfg.vocab_size * cfg.d_model + positions,
        layers: cfg.n_layers,
        d_model: cfg.d_model,
        context: cfg.max_len,
        source: source.into(),
    }
}

fn bert(name: &str, cfg: &BertConfig, source: &str) -> Sizes {
    Sizes {
        name: name.into(),
        params: cfg.num_params(true),
        embedding: (cfg.vocab_size + cfg.max_position_embeddings + cfg.type_vocab_size)
            * cfg.hidden_size,
        layers: cfg.num_hidden_layers,
        d_model: cfg.hidden_size,
        context: cfg.max_position_embeddings,
        source: source.into(),
    }
}

fn vit(name: &str, cfg: &ViTConfig, source: &str) -> Sizes {
    let tokens = 1 + cfg.grid() * cfg.grid();
    Sizes {
        name: name.into(),
        params: cfg.num_params(true),
        embedding: tokens * cfg.hidden_size,
        layers: cfg.num_hidden_layers,
        d_model: cfg.hidden_size,
        context: tokens,
        source: source.into(),
    }
}

/// An encoder-decoder: both stacks count as layers for the attention term, at
/// `context` positions.
fn seq2seq(
    name: &str,
    params: usize,
    embedding: usize,
    d: usize,
    layers: usize,
    context: usize,
    source: &str,
) -> Sizes {
    Sizes {
        name: name.into(),
        params,
        embedding,
        layers,
        d_model: d,
        context,
        source: source.into(),
    }
}

fn t5(name: &str, cfg: &T5Config, source: &str) -> Result<Sizes, Error> {
    let tables = if cfg.tie_word_embeddings { 1 } else { 2 };
    Ok(seq2seq(
        name,
        cfg.num_params()?,
        tables * cfg.vocab_size * cfg.d_model,
        cfg.d_model,
        cfg.num_layers + cfg.decoder_layers(),
        512,
        source,
    ))
}

fn marian(name: &str, cfg: &MarianConfig, source: &str) -> Sizes {
    seq2seq(
        name,
        cfg.num_params(),
        cfg.vocab_size * cfg.d_model,
        cfg.d_model,
        cfg.encoder_layers + cfg.decoder_layers,
        cfg.max_position_embeddings,
        source,
    )
}

/// Llama-3's published configuration (HF `config.json` of Meta-Llama-3-8B / -70B):
/// vocabulary 128,256, 8 KV heads, SwiGLU, RMSNorm, untied head, RoPE.
fn llama3(hidden: usize, layers: usize, heads: usize, ffn: usize) -> DecoderConfig {
    DecoderConfig::new(128_256, hidden, layers, heads, 8192)
        .llama_style()
        .with_n_kv_heads(Some(8))
        .with_d_ff(Some(ffn))
}

/// Reads a `config.json` (or the folder holding one) of a family the zoo counts.
fn from_file(path: &Path) -> Result<Sizes, Error> {
    let file: PathBuf = if path.is_dir() {
        path.join("config.json")
    } else {
        path.to_path_buf()
    };
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", file.display()))?;
    let model_type = json
        .get("model_type")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| format!("{}: no \"model_type\"", file.display()))?
        .to_string();
    let name = file.display().to_string();
    let source = format!("{model_type} config.json");
    let bad = |e: &dyn std::fmt::Display| format!("{}: {e}", file.display());
    Ok(match model_type.as_str() {
        "bert" => bert(
            &name,
            &BertConfig::from_json(&text).map_err(|e| bad(&e))?,
            &source,
        ),
        "vit" => vit(
            &name,
            &ViTConfig::from_json(&text).map_err(|e| bad(&e))?,
            &source,
        ),
        "t5" => t5(
            &name,
            &serde_json::from_value(json).map_err(|e| bad(&e))?,
            &source,
        )
        .map_err(|e| bad(&e.to_string()))?,
        "marian" => marian(
            &name,
            &serde_json::from_value(json).map_err(|e| bad(&e))?,
            &source,
        ),
        "gpt2" => {
            let hf = HfDecoderConfig::Gpt2(serde_json::from_value(json).map_err(|e| bad(&e))?);
            decoder(&name, &hf.decoder().map_err(|e| bad(&e))?, &source)
        }
        "llama" | "mistral" | "qwen2" => {
            let hf = HfDecoderConfig::Llama(serde_json::from_value(json).map_err(|e| bad(&e))?);
            decoder(&name, &hf.decoder().map_err(|e| bad(&e))?, &source)
        }
        other => {
            return Err(format!(
                "{}: model_type {other:?} is not counted here (bert, vit, gpt2, llama, mistral, qwen2, t5, marian are)",
                file.display()
            )
            .into());
        }
    })
}

/// Bytes in GB or TB (decimal).
fn bytes(v: f64) -> String {
    if v >= 1e12 {
        format!("{:.2} TB", v / 1e12)
    } else {
        format!("{:.1} GB", v / 1e9)
    }
}

pub fn run(configs: &[PathBuf], tokens: Option<f64>) -> Result<(), Error> {
    if let Some(t) = tokens
        && !(t.is_finite() && t > 0.0)
    {
        return Err(format!("--tokens must be a positive number, got {t}").into());
    }
    let mut rows = vec![
        bert(
            "BERT-base",
            &BertConfig::bert_base_uncased(),
            "zoo preset bert_base_uncased()",
        ),
        bert(
            "all-MiniLM-L6-v2",
            &BertConfig::all_minilm_l6_v2(),
            "zoo preset all_minilm_l6_v2()",
        ),
        vit(
            "ViT-B/16",
            &ViTConfig::vit_base_patch16_224(),
            "zoo preset vit_base_patch16_224()",
        ),
        decoder(
            "GPT-2 small",
            &DecoderConfig::gpt2_small(),
            "zoo preset gpt2_small()",
        ),
        marian(
            "Transformer base",
            &MarianConfig::transformer(37000, 512, 6, 8, 2048, 512, 0, 1),
            "MarianConfig::transformer: Vaswani et al. (2017) base, 37,000 shared tokens",
        ),
        t5(
            "T5-small",
            &serde_json::from_value(serde_json::json!({
                "vocab_size": 32128, "d_model": 512, "d_kv": 64, "d_ff": 2048,
                "num_layers": 6, "num_heads": 8, "feed_forward_proj": "relu",
            }))?,
            "t5-small config: 6 + 6 layers, d 512, 8 heads, ffn 2048, tied",
        )?,
        decoder(
            "GPT-2 XL",
            &DecoderConfig::new(50257, 1600, 48, 25, 1024),
            "gpt2-xl config: 48 layers, d 1600, 25 heads",
        ),
        decoder(
            "Llama-3 8B",
            &llama3(4096, 32, 32, 14336),
            "Llama-3-8B config: 32 layers, d 4096, 32/8 heads, ffn 14336",
        ),
        decoder(
            "Llama-3 70B",
            &llama3(8192, 80, 64, 28672),
            "Llama-3-70B config: 80 layers, d 8192, 64/8 heads, ffn 28672",
        ),
        decoder(
            "GPT-3 175B",
            &DecoderConfig::new(50257, 12288, 96, 96, 2048),
            "GPT-3 paper, table 2.1: 96 layers, d 12288, 96 heads, context 2048",
        ),
    ];
    for path in configs {
        rows.push(from_file(path)?);
    }
    println!(
        "| model | parameters | non-embedding | context T | forward FLOPs / token at T | Chinchilla tokens (20 N) | text at 4 B/token | training FLOPs 6 N D |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let n = r.params as f64;
        let non_embedding = r.params.saturating_sub(r.embedding);
        // Kaplan et al. (2020): 2 N_non-embedding + 2 n_layer n_ctx d_attn per token.
        let forward = 2.0 * non_embedding as f64
            + 2.0 * r.layers as f64 * r.context as f64 * r.d_model as f64;
        let d = tokens.unwrap_or(20.0 * n);
        println!(
            "| {} | {} | {} | {} | {:.3e} | {:.3e} | {} | {:.3e} |",
            r.name,
            zoo_core::thousands(r.params),
            zoo_core::thousands(non_embedding),
            r.context,
            forward,
            20.0 * n,
            bytes(20.0 * n * 4.0),
            6.0 * n * d,
        );
    }
    println!();
    for r in &rows {
        println!("{}: {}", r.name, r.source);
    }
    if let Some(t) = tokens {
        println!("training FLOPs use D = {t:.3e} tokens (--tokens)");
    }
    Ok(())
}
