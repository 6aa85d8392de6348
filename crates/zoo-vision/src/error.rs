//! The crate's error type.

zoo_attention::family_error! {
    /// What can go wrong building or running a vision model.
    pub enum VisionError("ViT") {
        /// An image file that cannot be read or decoded, or a preprocessor configuration
        /// that cannot be used.
        #[error("{0}")]
        Image(String),
        /// A CLIP configuration value that cannot work, or a `config.json` that does
        /// not parse.
        #[error("invalid CLIP config: {0}")]
        ClipConfig(zoo_core::ConfigError),
    }
}
