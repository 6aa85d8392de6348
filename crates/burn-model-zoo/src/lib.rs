//! # burn-model-zoo
//!
//! The Burn Model Zoo from one dependency: transformer families written once on
//! [Burn](https://burn.dev) that load HuggingFace checkpoints, match `transformers`,
//! generate with a KV cache, and train with one shared learner, on every Burn backend.
//!
//! The families and tools are features of this crate, each re-exported as a module:
//!
//! | feature | module | what |
//! |---|---|---|
//! | `decoder` | [`decoder`] | GPT-2, Llama, Mistral, Qwen2/3, Phi-3, Gemma, GPT-NeoX |
//! | `encoder` | [`encoder`] | BERT, RoBERTa, sentence embeddings |
//! | `seq2seq` | [`seq2seq`] | T5, Marian, the original Transformer |
//! | `vision` | [`vision`] | ViT |
//! | `hub` (default) | [`hub`] | `AutoModel` and `TextGeneration` over every family (turns them all on) |
//! | `train` | `train` | the shared burn-train learner: tasks, `TrainConfig`, `fit` |
//! | `flex` (default), `ndarray`, `wgpu`, `tch`, `cuda` | [`device`] | the backends compiled in; [`device::select`] picks one at run time |
//!
//! Always there: [`attention`] (the transformer core: attention kernels, masks,
//! positions, KV cache, blocks), [`model`] (model traits, generation, beam search,
//! checkpoints), [`data`] (tokenizers, data sets, batchers) and [`burn`] itself.
//!
//! The common path is in the [`prelude`]. Text in, text out:
//!
//! ```
//! use burn_model_zoo::prelude::*;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let folder = concat!(env!("CARGO_MANIFEST_DIR"), "/../zoo-decoder/tests/fixtures/gpt2-tiny");
//! // `folder` holds config.json, model.safetensors and tokenizer.json, as HF writes them.
//! let device = select(BackendName::Flex)?;
//! let lm = TextGeneration::from_pretrained(folder, &device)?;
//! let text = lm.generate("ROMEO: Wherefore art", &GenerationConfig::greedy(8))?;
//! assert!(text.starts_with("ROMEO: Wherefore art") && text.len() > 20);
//! # Ok(())
//! # }
//! ```
//!
//! A layer of one's own in a stock decoder: implement [`decoder::Layer`] and build the
//! model with [`decoder::DecoderConfig::init_with`]; the model then trains with
//! `train`'s tasks and generates through [`model::generate()`] as the stock one does.
//! `templates/research` in the repository is a whole project that does this.
#![warn(missing_docs)]

pub use burn;
pub use zoo_attention as attention;
pub use zoo_core as model;
pub use zoo_data as data;
pub use zoo_device as device;

#[cfg(feature = "decoder")]
pub use zoo_decoder as decoder;
#[cfg(feature = "encoder")]
pub use zoo_encoder as encoder;
#[cfg(feature = "hub")]
pub use zoo_hub as hub;
#[cfg(feature = "seq2seq")]
pub use zoo_seq2seq as seq2seq;
#[cfg(feature = "train")]
pub use zoo_train as train;
#[cfg(feature = "vision")]
pub use zoo_vision as vision;

/// The common path: pick a device, load a folder, generate, embed, classify, train.
pub mod prelude {
    pub use burn::module::Module;
    pub use burn::tensor::{Bool, Device, Int, Tensor};
    pub use zoo_core::{
        BeamConfig, CausalLm, ClassLogits, GenerationConfig, SentenceEmbedding, TokenLogits,
        beam_search, generate,
    };
    pub use zoo_device::{BackendName, select};

    #[cfg(feature = "decoder")]
    pub use zoo_decoder::{DecoderConfig, DecoderInput, DecoderLm, Layer, LmTokenizer};
    #[cfg(feature = "encoder")]
    pub use zoo_encoder::{BertTokenizer, SentenceEncoder};
    #[cfg(feature = "hub")]
    pub use zoo_hub::{AutoModel, TextGeneration};
    #[cfg(feature = "train")]
    pub use zoo_train::{
        CausalLmTask, ClassificationTask, FitOptions, Seq2SeqTask, TrainConfig, fit,
    };
    #[cfg(feature = "vision")]
    pub use zoo_vision::ImageProcessor;
}

/// The README's programs, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
