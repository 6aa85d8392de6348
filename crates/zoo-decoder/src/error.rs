//! The crate's error type.

zoo_attention::family_error! {
    /// What can go wrong building or running a decoder.
    pub enum DecoderError("decoder") {
        /// Bad generation settings or prompts.
        #[error("generation: {0}")]
        Generation(String),
        /// A tokenizer that cannot be loaded or run.
        #[error("{0}")]
        Tokenizer(#[from] zoo_data::TokenizerError),
    }
}
