//! Word order through one self-attention layer: "Dog bites man." and "Man bites dog."
//! hold the same tokens in another order. Without positions, attention is permutation-
//! equivariant (each token's output depends on the set of tokens only), so the two
//! sentences give the same per-token outputs up to the swap, and "bites" cannot tell who
//! bit whom. With sinusoidal positions added to the embeddings, they differ.

use burn::nn::EmbeddingConfig;
use burn::tensor::{Device, Int, Tensor, TensorData};
use zoo_attention::position::sinusoidal_table;
use zoo_attention::{AttentionInput, MultiHeadAttentionConfig};
use zoo_examples::Error;

const WORDS: [&str; 4] = ["dog", "bites", "man", "."];

fn ids(sentence: &[&str], device: &Device) -> Tensor<2, Int> {
    let v: Vec<i64> = sentence
        .iter()
        .map(|w| WORDS.iter().position(|x| x == w).expect("a known word") as i64)
        .collect();
    Tensor::from_data(TensorData::new(v, [1, sentence.len()]), device)
}

fn max_abs(a: Tensor<2>, b: Tensor<2>) -> f32 {
    (a - b).abs().max().into_scalar::<f32>()
}

pub fn run(device: &Device) -> Result<(), Error> {
    let (d, heads) = (16, 2);
    device.seed(7);
    let embed = EmbeddingConfig::new(WORDS.len(), d).init(device);
    let attn = MultiHeadAttentionConfig::new(d, heads).init(device)?;
    let first = ["dog", "bites", "man", "."];
    let second = ["man", "bites", "dog", "."];
    // Row i of the second sentence is row SWAP[i] of the first.
    let swap = Tensor::<1, Int>::from_data(TensorData::new(vec![2i64, 1, 0, 3], [4]), device);
    println!(
        "\"Dog bites man.\" against \"Man bites dog.\": one attention layer, d = {d}, {heads} heads"
    );
    for with_positions in [false, true] {
        let encode = |sentence: &[&str]| -> Result<Tensor<2>, Error> {
            let mut x = embed.forward(ids(sentence, device)); // [1, 4, d]
            if with_positions {
                x = x + sinusoidal_table(sentence.len(), d, device)?.unsqueeze_dim(0);
            }
            let out = attn.forward(AttentionInput::new(x))?;
            Ok(out.context.reshape([sentence.len(), d]))
        };
        let (a, b) = (encode(&first)?, encode(&second)?);
        let permuted = a.clone().select(0, swap.clone());
        let scale = a.clone().abs().max().into_scalar::<f32>();
        let bites = max_abs(a.slice([1..2, 0..d]), b.clone().slice([1..2, 0..d]));
        println!(
            "{}: largest |out(Man bites dog) - swap(out(Dog bites man))| = {:.3e} \
             ({:.2e} of the largest output, {scale:.3e}); \"bites\" differs by {:.3e}",
            if with_positions {
                "with sinusoidal positions"
            } else {
                "without positions        "
            },
            max_abs(b.clone(), permuted.clone()),
            max_abs(b, permuted) / scale,
            bites
        );
    }
    Ok(())
}
