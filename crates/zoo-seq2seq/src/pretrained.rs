//! HF checkpoints of the encoder-decoder family: `T5ForConditionalGeneration` and
//! `MarianMTModel` load from `config.json` and their weights (safetensors, sharded, or
//! `pytorch_model.bin`) and save back in HF's layout, through `zoo-core`'s shared loader,
//! which names every missing, unexpected and mis-shaped tensor.
//!
//! | HF name (T5) | module path |
//! |---|---|
//! | `shared` | `shared` |
//! | `{encoder,decoder}.block.N.layer.0.SelfAttention.{q,k,v,o}` | `{encoder,decoder}.N.self_attn.{q,k,v,o}_proj` |
//! | `….block.0.layer.0.SelfAttention.relative_attention_bias` | `….0.self_attn.relative_bias.relative_attention_bias` |
//! | `….block.N.layer.0.layer_norm` | `….N.norm_1` |
//! | `decoder.block.N.layer.1.EncDecAttention.{q,k,v,o}`, `layer.1.layer_norm` | `decoder.N.cross_attn.{q,k,v,o}_proj`, `decoder.N.norm_cross` |
//! | feed-forward layer (`layer.1` encoder, `layer.2` decoder): `DenseReluDense.{wi,wi_0,wi_1,wo}`, `layer_norm` | `mlp.{up,gate,up,down}_proj`, `norm_2` |
//! | `{encoder,decoder}.final_layer_norm` | `{encoder,decoder}_norm` |
//!
//! | HF name (Marian) | module path |
//! |---|---|
//! | `model.shared` | `shared` |
//! | `model.{encoder,decoder}.layers.N.self_attn.{q,k,v,out}_proj` | `{encoder,decoder}.N.self_attn.{q,k,v,o}_proj` |
//! | `….self_attn_layer_norm` | `….norm_1` |
//! | `model.decoder.layers.N.encoder_attn.*`, `encoder_attn_layer_norm` | `decoder.N.cross_attn.*`, `decoder.N.norm_cross` |
//! | `….fc1`, `….fc2`, `….final_layer_norm` | `….mlp.up_proj`, `….mlp.down_proj`, `….norm_2` |
//! | `final_logits_bias` | `final_logits_bias` |
//!
//! Tied copies (`encoder.embed_tokens`, `lm_head` when tied) and Marian's computed
//! `embed_positions` are not weights of the model and are skipped.

use std::path::Path;

use burn::tensor::Device;
use zoo_core::checkpoint::{self, CheckpointError, KeyMap};
use zoo_core::validate;

use crate::config::{MarianConfig, T5Config};
use crate::error::{Result, Seq2SeqError};
use crate::marian::MarianMtModel;
use crate::t5::T5ForConditionalGeneration;

const T5_LOAD: [(&str, &str); 14] = [
    (
        r"^(encoder|decoder)\.block\.(\d+)\.layer\.0\.SelfAttention\.relative_attention_bias\.",
        "${1}.${2}.self_attn.relative_bias.relative_attention_bias.",
    ),
    (
        r"^(encoder|decoder)\.block\.(\d+)\.layer\.0\.SelfAttention\.([qkvo])\.",
        "${1}.${2}.self_attn.${3}_proj.",
    ),
    (
        r"^(encoder|decoder)\.block\.(\d+)\.layer\.0\.layer_norm\.",
        "${1}.${2}.norm_1.",
    ),
    (
        r"^decoder\.block\.(\d+)\.layer\.1\.EncDecAttention\.([qkvo])\.",
        "decoder.${1}.cross_attn.${2}_proj.",
    ),
    (
        r"^decoder\.block\.(\d+)\.layer\.1\.layer_norm\.",
        "decoder.${1}.norm_cross.",
    ),
    (r"^encoder\.block\.(\d+)\.layer\.1\.", "encoder.${1}.ff."),
    (r"^decoder\.block\.(\d+)\.layer\.2\.", "decoder.${1}.ff."),
    (r"\.ff\.DenseReluDense\.wi\.", ".mlp.up_proj."),
    (r"\.ff\.DenseReluDense\.wi_0\.", ".mlp.gate_proj."),
    (r"\.ff\.DenseReluDense\.wi_1\.", ".mlp.up_proj."),
    (r"\.ff\.DenseReluDense\.wo\.", ".mlp.down_proj."),
    (r"\.ff\.layer_norm\.", ".norm_2."),
    (r"^encoder\.final_layer_norm\.", "encoder_norm."),
    (r"^decoder\.final_layer_norm\.", "decoder_norm."),
];

fn t5_save(gated: bool) -> Vec<(&'static str, &'static str)> {
    vec![
        (
            r"^(encoder|decoder)\.(\d+)\.self_attn\.relative_bias\.relative_attention_bias\.",
            "${1}.block.${2}.layer.0.SelfAttention.relative_attention_bias.",
        ),
        (
            r"^(encoder|decoder)\.(\d+)\.self_attn\.([qkvo])_proj\.",
            "${1}.block.${2}.layer.0.SelfAttention.${3}.",
        ),
        (
            r"^(encoder|decoder)\.(\d+)\.norm_1\.",
            "${1}.block.${2}.layer.0.layer_norm.",
        ),
        (
            r"^decoder\.(\d+)\.cross_attn\.([qkvo])_proj\.",
            "decoder.block.${1}.layer.1.EncDecAttention.${2}.",
        ),
        (
            r"^decoder\.(\d+)\.norm_cross\.",
            "decoder.block.${1}.layer.1.layer_norm.",
        ),
        (
            r"^encoder\.(\d+)\.(mlp|norm_2)\.",
            "encoder.block.${1}.layer.1.${2}.",
        ),
        (
            r"^decoder\.(\d+)\.(mlp|norm_2)\.",
            "decoder.block.${1}.layer.2.${2}.",
        ),
        (r"\.mlp\.gate_proj\.", ".DenseReluDense.wi_0."),
        (
            r"\.mlp\.up_proj\.",
            if gated {
                ".DenseReluDense.wi_1."
            } else {
                ".DenseReluDense.wi."
            },
        ),
        (r"\.mlp\.down_proj\.", ".DenseReluDense.wo."),
        (r"\.norm_2\.", ".layer_norm."),
        (r"^encoder_norm\.", "encoder.final_layer_norm."),
        (r"^decoder_norm\.", "decoder.final_layer_norm."),
        (r"\.gamma$", ".weight"),
    ]
}

const MARIAN_LOAD: [(&str, &str); 10] = [
    (r"^model\.shared\.", "shared."),
    (
        r"^model\.(encoder|decoder)\.layers\.(\d+)\.self_attn\.out_proj\.",
        "${1}.${2}.self_attn.o_proj.",
    ),
    (
        r"^model\.(encoder|decoder)\.layers\.(\d+)\.self_attn\.",
        "${1}.${2}.self_attn.",
    ),
    (
        r"^model\.(encoder|decoder)\.layers\.(\d+)\.self_attn_layer_norm\.",
        "${1}.${2}.norm_1.",
    ),
    (
        r"^model\.decoder\.layers\.(\d+)\.encoder_attn\.out_proj\.",
        "decoder.${1}.cross_attn.o_proj.",
    ),
    (
        r"^model\.decoder\.layers\.(\d+)\.encoder_attn\.",
        "decoder.${1}.cross_attn.",
    ),
    (
        r"^model\.decoder\.layers\.(\d+)\.encoder_attn_layer_norm\.",
        "decoder.${1}.norm_cross.",
    ),
    (
        r"^model\.(encoder|decoder)\.layers\.(\d+)\.fc1\.",
        "${1}.${2}.mlp.up_proj.",
    ),
    (
        r"^model\.(encoder|decoder)\.layers\.(\d+)\.fc2\.",
        "${1}.${2}.mlp.down_proj.",
    ),
    (
        r"^model\.(encoder|decoder)\.layers\.(\d+)\.final_layer_norm\.",
        "${1}.${2}.norm_2.",
    ),
];

const MARIAN_SAVE: [(&str, &str); 12] = [
    (r"^shared\.", "model.shared."),
    (
        r"^(encoder|decoder)\.(\d+)\.self_attn\.o_proj\.",
        "model.${1}.layers.${2}.self_attn.out_proj.",
    ),
    (
        r"^(encoder|decoder)\.(\d+)\.self_attn\.",
        "model.${1}.layers.${2}.self_attn.",
    ),
    (
        r"^(encoder|decoder)\.(\d+)\.norm_1\.",
        "model.${1}.layers.${2}.self_attn_layer_norm.",
    ),
    (
        r"^decoder\.(\d+)\.cross_attn\.o_proj\.",
        "model.decoder.layers.${1}.encoder_attn.out_proj.",
    ),
    (
        r"^decoder\.(\d+)\.cross_attn\.",
        "model.decoder.layers.${1}.encoder_attn.",
    ),
    (
        r"^decoder\.(\d+)\.norm_cross\.",
        "model.decoder.layers.${1}.encoder_attn_layer_norm.",
    ),
    (
        r"^(encoder|decoder)\.(\d+)\.mlp\.up_proj\.",
        "model.${1}.layers.${2}.fc1.",
    ),
    (
        r"^(encoder|decoder)\.(\d+)\.mlp\.down_proj\.",
        "model.${1}.layers.${2}.fc2.",
    ),
    (
        r"^(encoder|decoder)\.(\d+)\.norm_2\.",
        "model.${1}.layers.${2}.final_layer_norm.",
    ),
    (r"\.gamma$", ".weight"),
    (r"\.beta$", ".bias"),
];

fn t5_map(cfg: &T5Config) -> KeyMap {
    let save = t5_save(cfg.feed_forward_proj.starts_with("gated"));
    let map = KeyMap::new()
        .tables(&T5_LOAD, &save)
        .ignore(r"^(encoder|decoder)\.embed_tokens\.weight$");
    if cfg.tie_word_embeddings {
        map.ignore(r"^lm_head\.weight$")
    } else {
        map
    }
}

fn marian_map() -> KeyMap {
    KeyMap::new()
        .tables(&MARIAN_LOAD, &MARIAN_SAVE)
        .ignore(r"^model\.(encoder|decoder)\.(embed_tokens|embed_positions)\.weight$")
        .ignore(r"^lm_head\.weight$")
}

fn model_type(cfg: &serde_json::Map<String, serde_json::Value>) -> Option<&str> {
    cfg.get("model_type").and_then(serde_json::Value::as_str)
}

fn io(dir: &Path, e: std::io::Error) -> Seq2SeqError {
    CheckpointError::Io {
        path: dir.to_path_buf(),
        message: e.to_string(),
    }
    .into()
}

impl T5ForConditionalGeneration {
    /// Loads an HF `T5ForConditionalGeneration` checkpoint folder.
    ///
    /// # Errors
    /// A missing or invalid `config.json`, no weights file, or tensors that do not fit,
    /// all of them named with their shapes.
    pub fn from_pretrained(dir: impl AsRef<Path>, device: &Device) -> Result<Self> {
        let dir = dir.as_ref();
        let cfg: T5Config = checkpoint::read_valid_config(dir, |c: &T5Config| {
            validate::model_type(model_type(&c.other), "t5", "T5").map_err(Seq2SeqError::Config)?;
            c.validate()
        })?;
        let mut model = cfg.init(device)?;
        checkpoint::load_into(&mut model, dir, &t5_map(&cfg))?;
        Ok(model)
    }

    /// Writes the model as an HF `T5ForConditionalGeneration` folder.
    ///
    /// # Errors
    /// A folder that cannot be written.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        let cfg = self.config();
        checkpoint::save_safetensors(self, &dir.join("model.safetensors"), &t5_map(cfg))?;
        checkpoint::write_config(dir, cfg, "t5", "T5ForConditionalGeneration")?;
        Ok(())
    }
}

impl MarianMtModel {
    /// Loads an HF `MarianMTModel` checkpoint folder.
    ///
    /// # Errors
    /// As [`T5ForConditionalGeneration::from_pretrained`].
    pub fn from_pretrained(dir: impl AsRef<Path>, device: &Device) -> Result<Self> {
        let dir = dir.as_ref();
        let cfg: MarianConfig = checkpoint::read_valid_config(dir, |c: &MarianConfig| {
            validate::model_type(model_type(&c.other), "marian", "Marian")
                .map_err(Seq2SeqError::Config)?;
            c.validate()
        })?;
        let mut model = cfg.init(device)?;
        checkpoint::load_into(&mut model, dir, &marian_map())?;
        Ok(model)
    }

    /// Writes the model as an HF `MarianMTModel` folder (the original Transformer's
    /// config keeps `sinusoid_layout: interleaved`, which HF does not read).
    ///
    /// # Errors
    /// A folder that cannot be written.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        checkpoint::save_safetensors(self, &dir.join("model.safetensors"), &marian_map())?;
        checkpoint::write_config(dir, self.config(), "marian", "MarianMTModel")?;
        Ok(())
    }
}
