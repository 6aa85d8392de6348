//! The crate's error type.

zoo_attention::family_error! {
    /// What can go wrong building or running an encoder.
    pub enum EncoderError("BERT") {
        /// A tokenizer that cannot be loaded, trained or run.
        #[error("{0}")]
        Tokenizer(#[from] zoo_data::TokenizerError),
        /// A ModernBERT configuration value that cannot work, or a `config.json` that
        /// does not parse.
        #[error("invalid ModernBERT config: {0}")]
        ModernBertConfig(zoo_core::ConfigError),
    }
}
