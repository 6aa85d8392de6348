//! HF checkpoints of the encoder-decoder family: `T5ForConditionalGeneration`,
//! `MarianMTModel`, `BartForConditionalGeneration` and `MBartForConditionalGeneration` load from `config.json` and their weights (safetensors, sharded, or
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
//! BART and mBART share Marian's layer names, and add:
//!
//! | HF name (BART, mBART) | module path |
//! |---|---|
//! | `model.{encoder,decoder}.embed_positions` | `frame.{encoder,decoder}_positions` |
//! | `model.{encoder,decoder}.layernorm_embedding` | `frame.{encoder,decoder}_embed_norm` |
//! | `model.encoder.layer_norm`, `model.decoder.layer_norm` (mBART) | `frame.final_norms.0`, `frame.final_norms.1` |
//!
//! Tied copies (`encoder.embed_tokens`, `lm_head` when tied) and Marian's computed
//! `embed_positions` are not weights of the model and are skipped.

use std::path::Path;

use burn::tensor::Device;
use zoo_core::checkpoint::{self, KeyMap};
use zoo_core::validate;

use crate::config::{MarianConfig, MarianVariant, T5Config};
use crate::error::Result;
use crate::marian::MarianMtModel;
use crate::t5::T5ForConditionalGeneration;

/// T5's names and module paths, with the MLP's up projection named as the config says
/// (`wi_1` beside the gate `wi_0` in gated checkpoints, `wi` alone otherwise).
fn t5_names(gated: bool) -> Vec<(String, String)> {
    let up = if gated { "wi_1" } else { "wi" };
    let mut names: Vec<(String, String)> = [
        (
            "{encoder|decoder}.block.{n}.layer.0.SelfAttention.relative_attention_bias.",
            "{encoder|decoder}.{n}.self_attn.relative_bias.relative_attention_bias.",
        ),
        (
            "{encoder|decoder}.block.{n}.layer.0.SelfAttention.{q|k|v|o}.",
            "{encoder|decoder}.{n}.self_attn.{q|k|v|o}_proj.",
        ),
        (
            "{encoder|decoder}.block.{n}.layer.0.layer_norm.",
            "{encoder|decoder}.{n}.norm_1.",
        ),
        (
            "decoder.block.{n}.layer.1.EncDecAttention.{q|k|v|o}.",
            "decoder.{n}.cross_attn.{q|k|v|o}_proj.",
        ),
        (
            "decoder.block.{n}.layer.1.layer_norm.",
            "decoder.{n}.norm_cross.",
        ),
        ("encoder.final_layer_norm.", "encoder_norm."),
        ("decoder.final_layer_norm.", "decoder_norm."),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    // The feed-forward sub-layer is the encoder block's second and the decoder's third.
    for (stack, layer) in [("encoder", 1), ("decoder", 2)] {
        for (theirs, ours) in [
            ("DenseReluDense.wi_0.", "mlp.gate_proj."),
            (&format!("DenseReluDense.{up}."), "mlp.up_proj."),
            ("DenseReluDense.wo.", "mlp.down_proj."),
            ("layer_norm.", "norm_2."),
        ] {
            names.push((
                format!("{stack}.block.{{n}}.layer.{layer}.{theirs}"),
                format!("{stack}.{{n}}.{ours}"),
            ));
        }
    }
    names
}

/// Marian's names (HF `MarianMTModel`) and module paths.
const MARIAN_NAMES: [(&str, &str); 10] = [
    ("model.shared.", "shared."),
    (
        "model.{encoder|decoder}.layers.{n}.self_attn.out_proj.",
        "{encoder|decoder}.{n}.self_attn.o_proj.",
    ),
    (
        "model.{encoder|decoder}.layers.{n}.self_attn.",
        "{encoder|decoder}.{n}.self_attn.",
    ),
    (
        "model.{encoder|decoder}.layers.{n}.self_attn_layer_norm.",
        "{encoder|decoder}.{n}.norm_1.",
    ),
    (
        "model.decoder.layers.{n}.encoder_attn.out_proj.",
        "decoder.{n}.cross_attn.o_proj.",
    ),
    (
        "model.decoder.layers.{n}.encoder_attn.",
        "decoder.{n}.cross_attn.",
    ),
    (
        "model.decoder.layers.{n}.encoder_attn_layer_norm.",
        "decoder.{n}.norm_cross.",
    ),
    (
        "model.{encoder|decoder}.layers.{n}.fc1.",
        "{encoder|decoder}.{n}.mlp.up_proj.",
    ),
    (
        "model.{encoder|decoder}.layers.{n}.fc2.",
        "{encoder|decoder}.{n}.mlp.down_proj.",
    ),
    (
        "model.{encoder|decoder}.layers.{n}.final_layer_norm.",
        "{encoder|decoder}.{n}.norm_2.",
    ),
];

fn t5_map(cfg: &T5Config) -> KeyMap {
    let names = t5_names(cfg.feed_forward_proj.starts_with("gated"));
    let names: Vec<(&str, &str)> = names
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let map = KeyMap::new()
        .names(&names)
        .ignore(r"^(encoder|decoder)\.embed_tokens\.weight$");
    if cfg.tie_word_embeddings {
        map.ignore(r"^lm_head\.weight$")
    } else {
        map
    }
}

/// What BART and mBART add to Marian's names.
const BART_NAMES: [(&str, &str); 4] = [
    (
        "model.{encoder|decoder}.embed_positions.",
        "frame.{encoder|decoder}_positions.",
    ),
    (
        "model.{encoder|decoder}.layernorm_embedding.",
        "frame.{encoder|decoder}_embed_norm.",
    ),
    ("model.encoder.layer_norm.", "frame.final_norms.0."),
    ("model.decoder.layer_norm.", "frame.final_norms.1."),
];

fn marian_map(variant: MarianVariant) -> KeyMap {
    let map = KeyMap::new().names(&MARIAN_NAMES);
    match variant {
        MarianVariant::Marian => {
            map.ignore(r"^model\.(encoder|decoder)\.(embed_tokens|embed_positions)\.weight$")
        }
        MarianVariant::Bart | MarianVariant::MBart => map
            .names(&BART_NAMES)
            .ignore(r"^model\.(encoder|decoder)\.embed_tokens\.weight$"),
    }
    .ignore(r"^lm_head\.weight$")
}

fn model_type(cfg: &serde_json::Map<String, serde_json::Value>) -> Option<&str> {
    cfg.get("model_type").and_then(serde_json::Value::as_str)
}

impl T5ForConditionalGeneration {
    /// Loads an HF `T5ForConditionalGeneration` checkpoint folder.
    ///
    /// # Errors
    /// A missing or invalid `config.json`, no weights file, or tensors that do not fit,
    /// all of them named with their shapes.
    pub fn from_pretrained(dir: impl AsRef<Path>, device: &Device) -> Result<Self> {
        let dir = dir.as_ref();
        let mut model = Self::from_config(dir, device)?;
        let map = t5_map(model.config());
        checkpoint::load_into(&mut model, dir, &map)?;
        Ok(model)
    }

    /// The model that `dir`'s `config.json` describes, with weights drawn at random from
    /// the device's generator (to train from scratch); the folder's weights are not read.
    ///
    /// # Errors
    /// A missing or invalid `config.json`.
    pub fn from_config(dir: impl AsRef<Path>, device: &Device) -> Result<Self> {
        let cfg: T5Config = checkpoint::read_valid_config(dir.as_ref(), |c: &T5Config| {
            validate::model_type(model_type(&c.other), "t5", "T5")?;
            c.validate()
        })?;
        cfg.init(device)
    }

    /// Writes the model as an HF `T5ForConditionalGeneration` folder.
    ///
    /// # Errors
    /// A folder that cannot be written.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        let (cfg, arch) = (self.config(), "T5ForConditionalGeneration");
        Ok(checkpoint::save_pretrained(
            self,
            dir.as_ref(),
            &t5_map(cfg),
            cfg,
            "t5",
            arch,
        )?)
    }
}

impl MarianMtModel {
    /// Loads an HF `MarianMTModel`, `BartForConditionalGeneration` or
    /// `MBartForConditionalGeneration` checkpoint folder (by `model_type`: marian, bart,
    /// mbart). A forced first token that transformers keeps in `generation_config.json`
    /// only (`forced_bos_token_id`) is read from there when `config.json` has none.
    ///
    /// # Errors
    /// As [`T5ForConditionalGeneration::from_pretrained`].
    pub fn from_pretrained(dir: impl AsRef<Path>, device: &Device) -> Result<Self> {
        let dir = dir.as_ref();
        let mut model = Self::from_config(dir, device)?;
        let map = marian_map(model.config().variant());
        checkpoint::load_into(&mut model, dir, &map)?;
        Ok(model)
    }

    /// The model that `dir`'s `config.json` (and its generation defaults) describe, with
    /// weights drawn at random from the device's generator (to train from scratch); the
    /// folder's weights are not read.
    ///
    /// # Errors
    /// A missing or invalid `config.json`.
    pub fn from_config(dir: impl AsRef<Path>, device: &Device) -> Result<Self> {
        let dir = dir.as_ref();
        let mut cfg: MarianConfig = checkpoint::read_valid_config(dir, |c: &MarianConfig| {
            let family = match c.variant() {
                MarianVariant::Marian => "Marian",
                MarianVariant::Bart => "BART",
                MarianVariant::MBart => "mBART",
            };
            validate::model_type(model_type(&c.other), c.variant().model_type(), family)?;
            c.validate()
        })?;
        if cfg.forced_bos_token_id.is_none()
            && let Some(generation) = checkpoint::GenerationDefaults::from_pretrained(dir)?
            && let Some(bos) = generation.other.get("forced_bos_token_id")
        {
            cfg.forced_bos_token_id = bos.as_u64().and_then(|b| usize::try_from(b).ok());
            cfg.validate()?;
        }
        cfg.init(device)
    }

    /// Writes the model as an HF folder of its variant's class (`MarianMTModel`, or
    /// BART's or mBART's; the original Transformer's config keeps `sinusoid_layout:
    /// interleaved`, which HF does not read).
    ///
    /// # Errors
    /// A folder that cannot be written.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        let (cfg, variant) = (self.config(), self.config().variant());
        Ok(checkpoint::save_pretrained(
            self,
            dir.as_ref(),
            &marian_map(variant),
            cfg,
            variant.model_type(),
            variant.architecture(),
        )?)
    }
}
