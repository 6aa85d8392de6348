//! An attention explorer on a real model: all-MiniLM-L6-v2 (6 layers of 12 heads) reads
//! the tutorials' two Winograd sentences. It prints the WordPiece tokens and ids, the
//! special tokens and the embedding row size, draws one PNG per layer with every head's
//! attention matrix (tokens on both axes), and names the token "it" attends to most in
//! each layer and head.

use std::path::{Path, PathBuf};

use burn::tensor::Device;
use zoo_encoder::{EncoderInput, SentenceEncoder};
use zoo_examples::Error;
use zoo_train::plot::heatmap_grid;

const SENTENCES: [&str; 2] = [
    "The dog chased the ball because it was moving.",
    "The animal didn't cross the street because it was too tired.",
];

pub fn run(model: Option<PathBuf>, device: &Device, out: &Path) -> Result<(), Error> {
    let dir =
        model.unwrap_or_else(|| zoo_core::checkpoint::cache_dir().join("models/all-MiniLM-L6-v2"));
    if !dir.join("modules.json").is_file() {
        return Err(format!(
            "no sentence-transformers folder at {} (run `cargo xtask fetch minilm`, or pass --model DIR)",
            dir.display()
        )
        .into());
    }
    let encoder = SentenceEncoder::from_pretrained(&dir, device)?;
    let tok = &encoder.tokenizer;
    let cfg = encoder.bert.config().clone();
    println!(
        "all-MiniLM-L6-v2: vocabulary {}, {} layers of {} heads, embedding rows of {} numbers",
        tok.vocab_size(),
        cfg.num_hidden_layers,
        cfg.num_attention_heads,
        cfg.hidden_size
    );
    let specials: Vec<String> = ["[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]"]
        .iter()
        .filter_map(|t| tok.token_id(t).map(|id| format!("{t} = {id}")))
        .collect();
    println!("special tokens: {}", specials.join(", "));
    for (s, sentence) in SENTENCES.iter().enumerate() {
        let enc = tok.encode(sentence)?;
        println!("\nsentence {}: {sentence:?}", s + 1);
        println!("  tokens: {}", enc.tokens.join(" "));
        println!(
            "  ids:    {}",
            enc.ids
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        );
        let batch = tok.encode_batch(&[sentence])?;
        let output = encoder
            .bert
            .forward(EncoderInput::from_batch(&batch, device).with_weights())?;
        let it = enc
            .tokens
            .iter()
            .position(|t| t == "it")
            .ok_or("the sentence has no token \"it\"")?;
        let labels: Vec<String> = enc.tokens.clone();
        println!(
            "  where \"it\" (token {it}) looks most, per layer (heads 1..{}):",
            cfg.num_attention_heads
        );
        for (layer, weights) in output.attentions.iter().enumerate() {
            let [_, heads, t, _] = weights.dims();
            let w = weights
                .clone()
                .into_data()
                .try_to_vec::<f32>()
                .map_err(|e| format!("{e:?}"))?;
            let mut panels = Vec::with_capacity(heads);
            let mut picks = Vec::with_capacity(heads);
            for h in 0..heads {
                let m: Vec<Vec<f32>> = (0..t)
                    .map(|i| w[(h * t + i) * t..(h * t + i + 1) * t].to_vec())
                    .collect();
                let (best, share) = m[it]
                    .iter()
                    .enumerate()
                    .fold(
                        (0, f32::MIN),
                        |acc, (j, &v)| if v > acc.1 { (j, v) } else { acc },
                    );
                picks.push(format!("{} {:.2}", labels[best], share));
                panels.push((format!("layer {} head {}", layer + 1, h + 1), m));
            }
            println!("    layer {}: {}", layer + 1, picks.join(" | "));
            let png = heatmap_grid(
                &out.join(format!("attention-s{}-layer{}.png", s + 1, layer + 1)),
                &panels,
                &labels,
                &labels,
                4,
            )?;
            if layer == 0 {
                println!("  PNGs: {} (and one per layer)", png.display());
            }
        }
    }
    Ok(())
}
