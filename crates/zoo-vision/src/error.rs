//! The crate's error type.

zoo_attention::family_error! {
    /// What can go wrong building or running a vision model.
    pub enum VisionError("ViT") {
        /// An image file that cannot be read or decoded, or a preprocessor configuration
        /// that cannot be used.
        #[error("{0}")]
        Image(String),
    }
}
