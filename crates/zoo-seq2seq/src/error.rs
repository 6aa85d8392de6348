//! The crate's error type.

zoo_attention::family_error! {
    /// What can go wrong building or running an encoder-decoder model.
    pub enum Seq2SeqError("encoder-decoder") {}
}
